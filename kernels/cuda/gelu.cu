// GELU (tanh approximation) forward and backward, fp32/bf16/fp16 (kernels/gelu.h).
#include "kernels/cuda/gelu.cuh"
#include "kernels/gelu.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_float<T>(gelu_value(to_float(inp[i])));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dinp[i] = from_float<T>(gelu_grad(to_float(inp[i])) * to_float(dout[i]));
  }
}

}  // namespace

void gelu_forward(Context& ctx, Tensor out, Tensor inp) {
  CudaState& st = state_of(ctx);
  check_cuda(out, "gelu_forward", "out");
  check_cuda(inp, "gelu_forward", "inp");
  const int64_t n = inp.numel();
  TRAINER_CHECK(out.numel() == n && out.dtype == inp.dtype, "gelu_forward: out {} vs inp {}",
                out.str(), inp.str());
  if (n == 0) return;
  TRAINER_FLOAT_DISPATCH(inp.dtype, "gelu_forward", {
    gelu_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const T*>(inp.data), n);
  });
  CUDA_LAUNCH_CHECK();
}

void gelu_backward(Context& ctx, Tensor dinp, Tensor dout, Tensor inp) {
  CudaState& st = state_of(ctx);
  check_cuda(dinp, "gelu_backward", "dinp");
  check_cuda(dout, "gelu_backward", "dout");
  check_cuda(inp, "gelu_backward", "inp");
  const int64_t n = inp.numel();
  TRAINER_CHECK(dinp.numel() == n && dout.numel() == n && dinp.dtype == inp.dtype &&
                    dout.dtype == inp.dtype,
                "gelu_backward: dinp {} dout {} inp {}", dinp.str(), dout.str(), inp.str());
  if (n == 0) return;
  TRAINER_FLOAT_DISPATCH(inp.dtype, "gelu_backward", {
    gelu_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(dinp.data), static_cast<const T*>(dout.data),
        static_cast<const T*>(inp.data), n);
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
