// Document starts (attention's doc_start operand) for the attention tests of
// every backend: the CPU op, the warp-emulated tiles and the CUDA ops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace trainer::testing {

// B rows of T queries at `offset` into the keys, each row's documents beginning
// at the given key indices (besides key 0): a query's start is the last of them
// at or before its own key index.
inline std::vector<int32_t> doc_starts(int64_t B, int64_t T, int64_t offset,
                                       const std::vector<std::vector<int32_t>>& starts) {
  std::vector<int32_t> out(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int32_t st : starts[b])
        if (st <= offset + i) out[b * T + i] = std::max(out[b * T + i], st);
  return out;
}

}  // namespace trainer::testing
