// SwiGLU gate silu(gate) * up, forward and backward, fp32/bf16/fp16 (kernels/swiglu.h).
#include "kernels/cuda/common.cuh"
#include "kernels/swiglu.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = to_float(gate[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    out[i] = from_float<T>(g * sig * to_float(up[i]));
  }
}

template <class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate,
                                       const T* up, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = to_float(gate[i]), u = to_float(up[i]), d = to_float(dout[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    // d silu(g) / dg = sig * (1 + g * (1 - sig))
    dgate[i] = from_float<T>(d * u * sig * (1.0f + g * (1.0f - sig)));
    dup[i] = from_float<T>(d * g * sig);
  }
}

void check_same(const Tensor& t, const Tensor& ref, const char* op, const char* name) {
  check_cuda(t, op, name);
  TRAINER_CHECK(t.numel() == ref.numel() && t.dtype == ref.dtype, "{}: {} {} vs gate {}", op,
                name, t.str(), ref.str());
}

}  // namespace

void swiglu_forward(Context& ctx, Tensor out, Tensor gate, Tensor up) {
  CudaState& st = state_of(ctx);
  check_cuda(gate, "swiglu_forward", "gate");
  check_same(out, gate, "swiglu_forward", "out");
  check_same(up, gate, "swiglu_forward", "up");
  const int64_t n = gate.numel();
  if (n == 0) return;
  TRAINER_FLOAT_DISPATCH(gate.dtype, "swiglu_forward", {
    swiglu_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const T*>(gate.data),
        static_cast<const T*>(up.data), n);
  });
  CUDA_LAUNCH_CHECK();
}

void swiglu_backward(Context& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate,
                     Tensor up) {
  CudaState& st = state_of(ctx);
  check_cuda(gate, "swiglu_backward", "gate");
  check_same(dgate, gate, "swiglu_backward", "dgate");
  check_same(dup, gate, "swiglu_backward", "dup");
  check_same(dout, gate, "swiglu_backward", "dout");
  check_same(up, gate, "swiglu_backward", "up");
  const int64_t n = gate.numel();
  if (n == 0) return;
  TRAINER_FLOAT_DISPATCH(gate.dtype, "swiglu_backward", {
    swiglu_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(dgate.data), static_cast<T*>(dup.data), static_cast<const T*>(dout.data),
        static_cast<const T*>(gate.data), static_cast<const T*>(up.data), n);
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
