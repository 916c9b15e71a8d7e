// Per-token sigmoid gate on the GPU (kernels/sigmoid_gate.h): the forward one
// thread per element, the backward one warp per token row (its dot product in
// double, a fixed butterfly: the same bits on every run). The sigmoid is taken
// in double and rounded once, and the products use __fmul_rn, as the CPU op.
#include "kernels/cuda/moe_common.cuh"
#include "kernels/sigmoid_gate.h"

namespace trainer::cuda {
namespace {

using moe::AnyFloat;

constexpr int kThreads = 256;

__device__ __forceinline__ float gate_sigmoid(float g) {
  return static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(g))));
}

__global__ void gate_forward_kernel(AnyFloat out, AnyFloat y, const float* gate, int64_t N,
                                    int64_t C) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out.store(i, __fmul_rn(gate_sigmoid(gate[i / C]), y.load(i)));
}

__global__ void gate_backward_kernel(AnyFloat dy, float* dgate, AnyFloat dout, AnyFloat y,
                                     const float* gate, int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; n < N;
       n += static_cast<int64_t>(gridDim.x) * warps) {
    const float a = gate_sigmoid(gate[n]);
    double dot = 0.0;
    for (int64_t c = lane; c < C; c += 32) {
      const int64_t i = n * C + c;
      const float d = dout.load(i);
      dot += static_cast<double>(d) * y.load(i);
      dy.store(i, __fmul_rn(a, d));
    }
    dot = moe::warp_sum_double(dot);
    if (lane == 0) dgate[n] = static_cast<float>(dot * a * (1.0 - static_cast<double>(a)));
  }
}

int64_t checked_rows(const Tensor& y, const Tensor& gate, const char* op) {
  TRAINER_CHECK(y.ndim == 2, "{}: y {} must be 2-D", op, y.str());
  check_shape(gate, {y.size(0), 1}, "sigmoid_gate gate");
  check_cuda(gate, op, "gate");
  check_dtype(gate, DType::f32, op, "gate");
  moe::check_float_arg(y, op, "y");
  return y.size(0);
}

}  // namespace

void sigmoid_gate_forward(Context& ctx, Tensor out, Tensor y, Tensor gate) {
  const char* op = "sigmoid_gate_forward";
  CudaState& st = state_of(ctx);
  const int64_t N = checked_rows(y, gate, op), C = y.size(1);
  check_shape(out, {N, C}, "sigmoid_gate_forward out");
  moe::check_float_arg(out, op, "out");
  if (N * C == 0) return;
  gate_forward_kernel<<<grid_for(N * C, kThreads), kThreads, 0, st.stream>>>(
      moe::any_float(out, op, "out"), moe::any_float(y, op, "y"),
      static_cast<const float*>(gate.data), N, C);
  CUDA_LAUNCH_CHECK();
}

void sigmoid_gate_backward(Context& ctx, Tensor dy, Tensor dgate, Tensor dout, Tensor y,
                           Tensor gate) {
  const char* op = "sigmoid_gate_backward";
  CudaState& st = state_of(ctx);
  const int64_t N = checked_rows(y, gate, op), C = y.size(1);
  check_shape(dy, {N, C}, "sigmoid_gate_backward dy");
  check_shape(dout, {N, C}, "sigmoid_gate_backward dout");
  check_shape(dgate, {N, 1}, "sigmoid_gate_backward dgate");
  moe::check_float_arg(dy, op, "dy");
  moe::check_float_arg(dout, op, "dout");
  check_cuda(dgate, op, "dgate");
  check_dtype(dgate, DType::f32, op, "dgate");
  if (N == 0) return;
  constexpr int kWarps = kThreads / 32;
  gate_backward_kernel<<<grid_for(N, kWarps), kThreads, 0, st.stream>>>(
      moe::any_float(dy, op, "dy"), static_cast<float*>(dgate.data),
      moe::any_float(dout, op, "dout"), moe::any_float(y, op, "y"),
      static_cast<const float*>(gate.data), N, C);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
