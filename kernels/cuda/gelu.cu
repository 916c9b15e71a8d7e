// GELU (tanh approximation) forward and backward, fp32/bf16/fp16 (kernels/gelu.h),
// where the GELU is not fused into the GEMM (model/fp8_gemm.cpp's FP8 path).
//
// Bandwidth-bound: one bf16 per thread per load moves 64 bytes a warp
// instruction, an eighth of a 16-byte load's, so the load and store instructions,
// not DRAM, would set the pace. Where every base pointer is 16-byte aligned and n
// is whole packs (pack::packable, per call) a thread moves 16-byte packs (V
// elements); otherwise V = 1. Each element's arithmetic is the same either way.
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/pack.cuh"
#include "kernels/gelu.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

template <int V, class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  pack::for_each_step<V>(n, [&](int64_t i) {
    pack::Floats<V> x = pack::load<V>(inp + i);
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = gelu_value(x[j]);
    pack::store(out + i, x);
  });
}

template <int V, class T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n) {
  pack::for_each_step<V>(n, [&](int64_t i) {
    const pack::Floats<V> x = pack::load<V>(inp + i);
    pack::Floats<V> d = pack::load<V>(dout + i);  // dinp may alias dout
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = gelu_grad(x[j]) * d[j];
    pack::store(dinp + i, d);
  });
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
  const bool vec = pack::packable(n, {&out, &inp});
  TRAINER_FLOAT_DISPATCH(inp.dtype, "gelu_forward", TRAINER_PACK_WIDTH_DISPATCH(vec, T, {
    gelu_forward_kernel<V, T><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const T*>(inp.data), n);
  }));
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
  const bool vec = pack::packable(n, {&dinp, &dout, &inp});
  TRAINER_FLOAT_DISPATCH(inp.dtype, "gelu_backward", TRAINER_PACK_WIDTH_DISPATCH(vec, T, {
    gelu_backward_kernel<V, T><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(dinp.data), static_cast<const T*>(dout.data),
        static_cast<const T*>(inp.data), n);
  }));
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
