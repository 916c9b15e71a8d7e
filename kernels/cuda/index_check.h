// Integer operands the CPU ops refuse when out of range (document starts,
// learned positions): the same refusal on the GPU. The values live on the
// device, so the check is a kernel plus one stream sync (8 bytes back) before
// the op launches anything that reads them; the op's kernels may then trust them.
// Ops skip it where CudaState::check_index_operands is off (the engine's runs).
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_state.h"

namespace trainer::cuda {

struct OutOfRange {
  bool found = false;
  int64_t row = 0, col = 0;  // the first offending element in row-major order
  int32_t value = 0;
};

// An i32 (rows, cols) matrix, row stride ld (columns contiguous): the first
// element outside [0, hi + slope * col]. Uses index_check_scratch_bytes() of
// the op scratch, and synchronizes the stream.
OutOfRange find_out_of_range(CudaState& st, const int32_t* data, int64_t rows, int64_t cols,
                             int64_t ld, int64_t hi, int64_t slope, const char* op);

}  // namespace trainer::cuda
