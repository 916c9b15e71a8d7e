// Reference logits for an exported Hugging Face model: this trainer's logits
// on a fixed token sequence, written next to the export, so any other loader
// (transformers, vLLM, a user's conversion) can be checked against what the
// trainer computes (scripts/hf_check.py does it for transformers).
#pragma once

#include <cstdio>
#include <string>

namespace trainer::engine {

// Loads `hf_dir` (a `trainer export` output of checkpoint `step_dir`) into a
// one-rank fp32 CPU model of the checkpoint's architecture and writes
// hf_dir/reference.json ({"ids": [...], "vocab_size": V, "logits":
// "reference_logits.f32", ...}) and hf_dir/reference_logits.f32 (tokens x V
// row-major little-endian float32, the unpadded vocabulary). `tokens` is
// clamped to the model's max_seq_len.
void write_hf_reference(const std::string& step_dir, const std::string& hf_dir, int tokens,
                        FILE* log);

}  // namespace trainer::engine
