// A GEMM whose fp32 result a kernel must finish before it is stored (a bias the
// epilogue cannot add, GELU or its derivative without the epilogue, FP8's fp32
// bias): the rows go through an fp32 staging buffer in blocks of at most
// CudaState::staging_block_bytes (op_scratch.h), each block finished before the
// next overwrites it (both on state.stream), so the scratch these paths need is
// bounded by the block, not by M x N. An fp32 output is its own staging.
#pragma once

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {

// g: C (M, N) = A (M, K, not transposed) op(B), no batch, g.c unset. fp32_out: the
// op's own fp32 output (ld N), or null to stage. finish(acc, m0, rows) gets the
// fp32 result of rows [m0, m0 + rows), row-major with ld N, and launches what
// consumes it.
template <class Finish>
void staged_gemm(CudaState& st, GemmArgs g, float* fp32_out, const char* op, Finish&& finish) {
  TRAINER_CHECK(!g.trans_a && g.batch == 1, "{}: a staged GEMM takes an untransposed, unbatched A",
                op);
  const int64_t M = g.m, N = g.n;
  if (fp32_out) {
    g.c = {fp32_out, DType::f32, N, 0};
    gemm(st, g);
    finish(static_cast<const float*>(fp32_out), int64_t{0}, M);
    return;
  }
  const int64_t rows = staging_block_rows(M, N, st.staging_block_bytes);
  auto* acc = static_cast<float*>(scratch(st, staging_scratch_bytes(M, N, st.staging_block_bytes), op));
  const auto* a = static_cast<const unsigned char*>(g.a.ptr);
  for (int64_t m0 = 0; m0 < M; m0 += rows) {
    g.m = std::min(rows, M - m0);
    g.a.ptr = a + m0 * g.a.ld * static_cast<int64_t>(dtype_size(g.a.dtype));
    g.c = {acc, DType::f32, N, 0};
    gemm(st, g);
    finish(static_cast<const float*>(acc), m0, g.m);
  }
}

}  // namespace trainer::cuda
