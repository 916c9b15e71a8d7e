#include "engine/tensorboard/crc32c.h"

#include <array>

namespace trainer::engine::tensorboard {
namespace {

// One byte at a time through a 256-entry table: metrics records are a few
// hundred bytes per step, so neither slicing-by-8 nor the SSE4.2 instruction
// would be measurable, and this runs the same on every CPU.
constexpr std::array<uint32_t, 256> make_table() {
  constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) crc = kTable[(crc ^ b) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace trainer::engine::tensorboard
