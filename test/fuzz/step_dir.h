// A checkpoint step directory built from a fuzz input, shared by the
// checkpoint and resume targets. Input: bytes 0-1 = metadata.json's length,
// then metadata.json, then the shard rank_00000.safetensors; manifest.json is
// written with the files' true sizes and digests, as a save does, so the
// crafted contents get past the checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace trainer::fuzz {

// The directory's path; "" when the input is too short to hold the length.
std::string write_step_dir(const uint8_t* data, size_t size);

}  // namespace trainer::fuzz
