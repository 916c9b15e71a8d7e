// Little-endian integers appended to a byte string: the byte order of
// TFRecord lengths and CRCs and of protobuf's fixed32/fixed64 values.
#pragma once

#include <cstdint>
#include <string>

namespace trainer::engine::tensorboard {

inline void append_le(std::string& out, uint64_t v, int n_bytes) {
  for (int i = 0; i < n_bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

}  // namespace trainer::engine::tensorboard
