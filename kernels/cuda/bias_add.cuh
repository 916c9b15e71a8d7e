// out[m, n] = acc[m, n] + bias[n], rounded once into out: the linear layers' bias
// when cuBLASLt's epilogue cannot add it (no algorithm for it, or an fp32 bias with
// a 16-bit output, whose GEMM writes fp32 scratch `acc`). Each element is read
// before it is written by the same thread, so acc may alias out.
#pragma once

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace trainer::cuda {

// Rows along grid y, columns along x: no per-element division.
template <class TO, class TA, class TB>
__global__ void add_bias_kernel(TO* out, const TA* acc, const TB* bias, int64_t M, int64_t N) {
  for (int64_t m = blockIdx.y; m < M; m += gridDim.y)
    for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
         n += static_cast<int64_t>(gridDim.x) * blockDim.x)
      out[m * N + n] = from_float<TO>(to_float(acc[m * N + n]) + to_float(bias[n]));
}

template <class TO, class TA, class TB>
void add_bias(CudaState& st, TO* out, const TA* acc, const TB* bias, int64_t M, int64_t N) {
  constexpr int kThreads = 256;
  const dim3 grid(grid_for(N, kThreads), static_cast<unsigned>(std::min<int64_t>(M, kMaxGridY)));
  add_bias_kernel<TO, TA, TB><<<grid, kThreads, 0, st.stream>>>(out, acc, bias, M, N);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
