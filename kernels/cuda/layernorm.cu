// LayerNorm forward and backward over the last dim (kernels/layernorm.h). One warp
// per row; activations fp32, bf16 or fp16, weight and bias fp32 (mixed precision
// keeps them so) or the activations' dtype; statistics and the weight/bias
// gradients fp32. dweight/dbias use the deterministic column sums of colsum.cuh.
//
// The row passes are bandwidth-bound: one bf16 per lane per load moves 64 bytes
// a warp instruction, an eighth of what 16-byte loads move, so the load and
// store instructions, not DRAM, would set the pace. Where alignment and width
// allow (norm::vector_rows, per call), each lane moves 16-byte packs (V
// elements); otherwise V = 1, one element per lane. Only the order of each
// lane's partial sums differs between the two.
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/norm_common.cuh"
#include "kernels/layernorm.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

using norm::kThreads;

template <int V, class T, class W>
__global__ void layernorm_forward_kernel(T* out, float* mean_out, float* rstd_out, const T* inp,
                                         const W* weight, const W* bias, int64_t N, int64_t C,
                                         float eps) {
  using F = norm::Floats<V>;
  const int64_t row = norm::warp_row();
  if (row >= N) return;  // whole warp leaves together: no shuffle sees a missing lane
  const T* x = inp + row * C;
  float sum = 0.0f;
  norm::for_lane_steps<V>(C, [&](int64_t, const F& v) {
#pragma unroll
    for (int j = 0; j < V; ++j) sum += v[j];
  }, x);
  const float mean = warp_sum(sum) / static_cast<float>(C);
  float sq = 0.0f;
  norm::for_lane_steps<V>(C, [&](int64_t, const F& v) {
#pragma unroll
    for (int j = 0; j < V; ++j) sq += (v[j] - mean) * (v[j] - mean);
  }, x);
  const float rstd = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  T* y = out + row * C;
  norm::for_lane_steps<V>(C, [&](int64_t c, F v, const F& w, const F& b) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = (v[j] - mean) * rstd * w[j] + b[j];
    norm::store(y + c, v);
  }, x, weight, bias);
  if (threadIdx.x % 32 == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <int V, class T, class W>
__global__ void layernorm_backward_kernel(T* dinp, const T* dout, const T* inp, const W* weight,
                                          const float* mean, const float* rstd, int64_t N,
                                          int64_t C) {
  using F = norm::Floats<V>;
  const int64_t row = norm::warp_row();
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  norm::for_lane_steps<V>(C, [&](int64_t, const F& g, const F& w, const F& v) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float dnorm = g[j] * w[j];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * (v[j] - m) * r;
    }
  }, dy, weight, x);
  const float dnorm_mean = warp_sum(dnorm_sum) / static_cast<float>(C);
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(C);
  T* dx = dinp + row * C;
  norm::for_lane_steps<V>(C, [&](int64_t c, const F& g, const F& w, F v) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float xhat = (v[j] - m) * r;
      v[j] = (g[j] * w[j] - dnorm_mean - xhat * dnorm_norm_mean) * r;
    }
    norm::store(dx + c, v);
  }, dy, weight, x);
}

template <class T>
struct NormTimesGrad {  // dout[n, c] * (inp[n, c] - mean[n]) * rstd[n]
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const {
    return to_float(dout[n * C + c]) * (to_float(inp[n * C + c]) - mean[n]) * rstd[n];
  }
};

template <class T>
struct Grad {  // dout[n, c]
  const T* dout;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const { return to_float(dout[n * C + c]); }
};

}  // namespace

void layernorm_forward(Context& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor inp,
                       Tensor weight, Tensor bias, float eps) {
  const char* op = "layernorm_forward";
  CudaState& st = state_of(ctx);
  const auto [N, C] = norm::check_forward(out, rstd, inp, weight, op);
  norm::check_vec(bias, C, weight.dtype, op, "bias");
  norm::check_vec(mean, N, DType::f32, op, "mean");
  if (N == 0) return;
  const unsigned blocks = norm::row_blocks(N, op);
  const bool vec = norm::vector_rows(C, {&out, &inp, &weight, &bias});
  TRAINER_FLOAT_DISPATCH(inp.dtype, op,
                         TRAINER_PARAM_DISPATCH(weight.dtype, inp.dtype, op, "weight",
                                                TRAINER_NORM_WIDTH_DISPATCH(vec, {
    layernorm_forward_kernel<V, T, W><<<blocks, kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<float*>(mean.data), static_cast<float*>(rstd.data),
        static_cast<const T*>(inp.data), static_cast<const W*>(weight.data),
        static_cast<const W*>(bias.data), N, C, eps);
  })));
  CUDA_LAUNCH_CHECK();
}

void layernorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                        Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  CudaState& st = state_of(ctx);
  const auto [N, C] = norm::check_backward(dinp, dweight, dout, inp, weight, rstd, op);
  norm::check_vec(dbias, C, DType::f32, op, "dbias");
  norm::check_vec(mean, N, DType::f32, op, "mean");
  if (N == 0) return;
  const unsigned blocks = norm::row_blocks(N, op);
  const bool vec = norm::vector_rows(C, {&dinp, &dout, &inp, &weight});
  float* partial = static_cast<float*>(scratch(st, norm_scratch_bytes(N, C), op));
  TRAINER_FLOAT_DISPATCH(inp.dtype, op,
                         TRAINER_PARAM_DISPATCH(weight.dtype, inp.dtype, op, "weight", {
    const T* dy = static_cast<const T*>(dout.data);
    const T* x = static_cast<const T*>(inp.data);
    const float* m = static_cast<const float*>(mean.data);
    const float* r = static_cast<const float*>(rstd.data);
    // Parameter gradients first: dinp may not alias dout, but reading before
    // writing keeps that option open.
    column_sums(st, NormTimesGrad<T>{dy, x, m, r, C}, N, C, partial,
                static_cast<float*>(dweight.data), true);
    column_sums(st, Grad<T>{dy, C}, N, C, partial, static_cast<float*>(dbias.data), true);
    TRAINER_NORM_WIDTH_DISPATCH(vec, {
      layernorm_backward_kernel<V, T, W><<<blocks, kThreads, 0, st.stream>>>(
          static_cast<T*>(dinp.data), dy, x, static_cast<const W*>(weight.data), m, r, N, C);
    });
  }));
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
