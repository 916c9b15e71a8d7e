// Deterministic column sums out[c] (+)= sum_n f(n, c) over an (N, C) grid, without
// atomics: pass 1 writes one partial per (row chunk, column) with a fixed
// summation order, pass 2 adds the partials in chunk order. The gradient of every
// per-channel parameter (biases, norm weights) goes through here, so reruns give
// identical bits.
#pragma once

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/op_scratch.h"

namespace trainer::cuda {

constexpr int kColsumRows = 8;  // threads along N per block (blockDim.y)

template <class F>
__global__ void column_partials_kernel(F f, int64_t num_rows, int64_t num_cols,
                                       int64_t rows_per_chunk, float* partial) {
  __shared__ float sums[kColsumRows][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = min(num_rows, begin + rows_per_chunk);
  float acc = 0.0f;
  if (c < num_cols)
    for (int64_t n = begin + threadIdx.y; n < end; n += kColsumRows) acc += f(n, c);
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < num_cols) {
    float s = 0.0f;
    for (int r = 0; r < kColsumRows; ++r) s += sums[r][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * num_cols + c] = s;
  }
}

__global__ void column_finish_kernel(const float* partial, int64_t num_chunks, int64_t num_cols,
                                     float* out, bool accumulate);

// Partials needed for (N, C): the caller provides column_sums_scratch_bytes(N, C)
// (kernels/op_scratch.h).

template <class F>
void column_sums(CudaState& st, F f, int64_t num_rows, int64_t num_cols, float* partial,
                 float* out, bool accumulate) {
  if (num_cols == 0) return;
  const int64_t chunks = column_sum_chunks(num_rows);
  const int64_t rows_per_chunk = std::max<int64_t>(1, (num_rows + chunks - 1) / chunks);
  const int64_t col_blocks = (num_cols + 31) / 32;
  TRAINER_CHECK(col_blocks < (int64_t{1} << 31) && chunks <= kMaxGridY,
                "column_sums: grid ({}, {}) too large", col_blocks, chunks);
  dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  // <F> spelled out: the emulator's launch (test/cuda_emu) takes the kernel's address.
  column_partials_kernel<F><<<grid, dim3(32, kColsumRows), 0, st.stream>>>(
      f, num_rows, num_cols, rows_per_chunk, partial);
  CUDA_LAUNCH_CHECK();
  column_finish_kernel<<<grid_for(num_cols, 256), 256, 0, st.stream>>>(partial, chunks, num_cols,
                                                                     out, accumulate);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
