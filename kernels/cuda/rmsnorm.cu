// RMSNorm forward and backward over the last dim (kernels/rmsnorm.h). One warp per
// row; activations fp32, bf16 or fp16, weight fp32 (mixed precision keeps it so)
// or the activations' dtype; rstd and dweight fp32. dweight uses the
// deterministic column sums of colsum.cuh.
//
// The row passes are bandwidth-bound: one bf16 per lane per load moves 64 bytes
// a warp instruction, an eighth of what 16-byte loads move, so the load and
// store instructions, not DRAM, would set the pace. Where alignment and width
// allow (norm::vector_rows, per call), each lane moves 16-byte packs (V
// elements); otherwise V = 1, one element per lane. Only the order of each
// lane's partial sums differs between the two.
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/norm_common.cuh"
#include "kernels/rmsnorm.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

using norm::kThreads;

template <int V, class T, class W>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd_out, const T* inp, const W* weight,
                                       int64_t N, int64_t C, float eps) {
  using F = norm::Floats<V>;
  const int64_t row = norm::warp_row();
  if (row >= N) return;  // whole warp leaves together
  const T* x = inp + row * C;
  float sq = 0.0f;
  norm::for_lane_steps<V>(C, [&](int64_t, const F& v) {
#pragma unroll
    for (int j = 0; j < V; ++j) sq += v[j] * v[j];
  }, x);
  const float rstd = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  T* y = out + row * C;
  norm::for_lane_steps<V>(C, [&](int64_t c, F v, const F& w) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = v[j] * rstd * w[j];
    norm::store(y + c, v);
  }, x, weight);
  if (threadIdx.x % 32 == 0) rstd_out[row] = rstd;
}

template <int V, class T, class W>
__global__ void rmsnorm_backward_kernel(T* dinp, const T* dout, const T* inp, const W* weight,
                                        const float* rstd, int64_t N, int64_t C) {
  using F = norm::Floats<V>;
  const int64_t row = norm::warp_row();
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  const float r = rstd[row];
  float dot = 0.0f;
  norm::for_lane_steps<V>(C, [&](int64_t, const F& g, const F& w, const F& v) {
#pragma unroll
    for (int j = 0; j < V; ++j) dot += g[j] * w[j] * v[j];
  }, dy, weight, x);
  const float dot_mean = warp_sum(dot) / static_cast<float>(C);
  T* dx = dinp + row * C;
  norm::for_lane_steps<V>(C, [&](int64_t c, const F& g, const F& w, F v) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = r * (g[j] * w[j] - v[j] * r * r * dot_mean);
    norm::store(dx + c, v);
  }, dy, weight, x);
}

template <class T>
struct NormTimesGrad {  // dout[n, c] * inp[n, c] * rstd[n]
  const T* dout;
  const T* inp;
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const {
    return to_float(dout[n * C + c]) * to_float(inp[n * C + c]) * rstd[n];
  }
};

}  // namespace

void rmsnorm_forward(Context& ctx, Tensor out, Tensor rstd, Tensor inp, Tensor weight,
                     float eps) {
  const char* op = "rmsnorm_forward";
  CudaState& st = state_of(ctx);
  const auto [N, C] = norm::check_forward(out, rstd, inp, weight, op);
  if (N == 0) return;
  const unsigned blocks = norm::row_blocks(N, op);
  const bool vec = norm::vector_rows(C, {&out, &inp, &weight});
  TRAINER_FLOAT_DISPATCH(inp.dtype, op,
                         TRAINER_PARAM_DISPATCH(weight.dtype, inp.dtype, op, "weight",
                                                TRAINER_NORM_WIDTH_DISPATCH(vec, {
    rmsnorm_forward_kernel<V, T, W><<<blocks, kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<float*>(rstd.data), static_cast<const T*>(inp.data),
        static_cast<const W*>(weight.data), N, C, eps);
  })));
  CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dout, Tensor inp,
                      Tensor weight, Tensor rstd) {
  const char* op = "rmsnorm_backward";
  CudaState& st = state_of(ctx);
  const auto [N, C] = norm::check_backward(dinp, dweight, dout, inp, weight, rstd, op);
  if (N == 0) return;
  const unsigned blocks = norm::row_blocks(N, op);
  const bool vec = norm::vector_rows(C, {&dinp, &dout, &inp, &weight});
  float* partial = static_cast<float*>(scratch(st, norm_scratch_bytes(N, C), op));
  TRAINER_FLOAT_DISPATCH(inp.dtype, op,
                         TRAINER_PARAM_DISPATCH(weight.dtype, inp.dtype, op, "weight", {
    const T* dy = static_cast<const T*>(dout.data);
    const T* x = static_cast<const T*>(inp.data);
    const float* r = static_cast<const float*>(rstd.data);
    column_sums(st, NormTimesGrad<T>{dy, x, r, C}, N, C, partial,
                static_cast<float*>(dweight.data), true);
    TRAINER_NORM_WIDTH_DISPATCH(vec, {
      rmsnorm_backward_kernel<V, T, W><<<blocks, kThreads, 0, st.stream>>>(
          static_cast<T*>(dinp.data), dy, x, static_cast<const W*>(weight.data), r, N, C);
    });
  }));
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
