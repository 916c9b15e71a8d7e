// LayerNorm forward and backward over the last dim (kernels/layernorm.h). One warp
// per row; activations fp32, bf16 or fp16, weight and bias fp32 (mixed precision
// keeps them so) or the activations' dtype; statistics and the weight/bias
// gradients fp32. dweight/dbias use the deterministic column sums of colsum.cuh.
#include "kernels/cuda/colsum.cuh"
#include "kernels/layernorm.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

template <class T, class W>
__global__ void layernorm_forward_kernel(T* out, float* mean_out, float* rstd_out, const T* inp,
                                         const W* weight, const W* bias, int64_t N, int64_t C,
                                         float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;  // whole warp leaves together: no shuffle sees a missing lane
  const T* x = inp + row * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum += to_float(x[c]);
  const float mean = warp_sum(sum) / static_cast<float>(C);
  float sq = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = to_float(x[c]) - mean;
    sq += d * d;
  }
  const float rstd = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  T* y = out + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float n = (to_float(x[c]) - mean) * rstd;
    y[c] = from_float<T>(n * to_float(weight[c]) + to_float(bias[c]));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <class T, class W>
__global__ void layernorm_backward_kernel(T* dinp, const T* dout, const T* inp, const W* weight,
                                          const float* mean, const float* rstd, int64_t N,
                                          int64_t C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float dnorm = to_float(dy[c]) * to_float(weight[c]);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (to_float(x[c]) - m) * r;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / static_cast<float>(C);
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(C);
  T* dx = dinp + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float norm = (to_float(x[c]) - m) * r;
    const float dnorm = to_float(dy[c]) * to_float(weight[c]);
    dx[c] = from_float<T>((dnorm - dnorm_mean - norm * dnorm_norm_mean) * r);
  }
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

void check_rows(const Tensor& t, int64_t N, int64_t C, DType dtype, const char* op,
                const char* name) {
  check_cuda(t, op, name);
  TRAINER_CHECK(t.ndim >= 1 && t.size(-1) == C && t.numel() == N * C && t.dtype == dtype,
                "{}: {} is {}, expected ({}, {}) {}", op, name, t.str(), N, C, dtype_name(dtype));
}

// A per-row or per-channel vector: any shape with n elements.
void check_vec(const Tensor& t, int64_t n, DType dtype, const char* op, const char* name) {
  check_cuda(t, op, name);
  TRAINER_CHECK(t.numel() == n && t.dtype == dtype, "{}: {} is {}, expected {} elements of {}",
                op, name, t.str(), n, dtype_name(dtype));
}

}  // namespace

void layernorm_forward(Context& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor inp,
                       Tensor weight, Tensor bias, float eps) {
  const char* op = "layernorm_forward";
  CudaState& st = state_of(ctx);
  check_cuda(inp, op, "inp");
  check_float_dtype(inp, op, "inp");
  const int64_t C = inp.size(-1), N = C ? inp.numel() / C : 0;
  check_rows(out, N, C, inp.dtype, op, "out");
  check_vec(weight, C, weight.dtype, op, "weight");  // its dtype: TRAINER_PARAM_DISPATCH
  check_vec(bias, C, weight.dtype, op, "bias");
  check_vec(mean, N, DType::f32, op, "mean");
  check_vec(rstd, N, DType::f32, op, "rstd");
  if (N == 0) return;
  const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  TRAINER_CHECK(blocks < (int64_t{1} << 31), "{}: {} rows exceed the grid", op, N);
  TRAINER_FLOAT_DISPATCH(inp.dtype, op,
                         TRAINER_PARAM_DISPATCH(weight.dtype, inp.dtype, op, "weight", {
    layernorm_forward_kernel<T, W><<<static_cast<unsigned>(blocks), kRowsPerBlock * 32, 0,
                                     st.stream>>>(
        static_cast<T*>(out.data), static_cast<float*>(mean.data), static_cast<float*>(rstd.data),
        static_cast<const T*>(inp.data), static_cast<const W*>(weight.data),
        static_cast<const W*>(bias.data), N, C, eps);
  }));
  CUDA_LAUNCH_CHECK();
}

void layernorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                        Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  CudaState& st = state_of(ctx);
  check_cuda(inp, op, "inp");
  check_float_dtype(inp, op, "inp");
  const int64_t C = inp.size(-1), N = C ? inp.numel() / C : 0;
  check_rows(dinp, N, C, inp.dtype, op, "dinp");
  check_rows(dout, N, C, inp.dtype, op, "dout");
  check_vec(weight, C, weight.dtype, op, "weight");
  check_vec(dweight, C, DType::f32, op, "dweight");
  check_vec(dbias, C, DType::f32, op, "dbias");
  check_vec(mean, N, DType::f32, op, "mean");
  check_vec(rstd, N, DType::f32, op, "rstd");
  if (N == 0) return;
  const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  TRAINER_CHECK(blocks < (int64_t{1} << 31), "{}: {} rows exceed the grid", op, N);
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
    layernorm_backward_kernel<T, W><<<static_cast<unsigned>(blocks), kRowsPerBlock * 32, 0,
                                      st.stream>>>(static_cast<T*>(dinp.data), dy, x,
                                                   static_cast<const W*>(weight.data), m, r, N, C);
  }));
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
