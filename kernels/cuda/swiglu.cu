// SwiGLU gate silu(gate) * up, forward and backward, fp32/bf16/fp16 (kernels/swiglu.h).
//
// Bandwidth-bound: one bf16 per thread per load moves 64 bytes a warp
// instruction, an eighth of a 16-byte load's, so the load and store instructions,
// not DRAM, would set the pace. Where every base pointer is 16-byte aligned and n
// is whole packs (pack::packable, per call) a thread moves 16-byte packs (V
// elements); otherwise V = 1. Each element's arithmetic is the same either way.
#include "kernels/cuda/pack.cuh"
#include "kernels/swiglu.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

template <int V, class T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  pack::for_each_step<V>(n, [&](int64_t i) {
    const pack::Floats<V> g = pack::load<V>(gate + i);
    pack::Floats<V> y = pack::load<V>(up + i);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float sig = 1.0f / (1.0f + expf(-g[j]));
      y[j] = g[j] * sig * y[j];
    }
    pack::store(out + i, y);
  });
}

template <int V, class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate,
                                       const T* up, int64_t n) {
  pack::for_each_step<V>(n, [&](int64_t i) {
    // Every load before the stores: dgate or dup may alias an input.
    const pack::Floats<V> g = pack::load<V>(gate + i), u = pack::load<V>(up + i),
                          d = pack::load<V>(dout + i);
    pack::Floats<V> dg, du;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float sig = 1.0f / (1.0f + expf(-g[j]));
      // d silu(g) / dg = sig * (1 + g * (1 - sig))
      dg[j] = d[j] * u[j] * sig * (1.0f + g[j] * (1.0f - sig));
      du[j] = d[j] * g[j] * sig;
    }
    pack::store(dgate + i, dg);
    pack::store(dup + i, du);
  });
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
  const bool vec = pack::packable(n, {&out, &gate, &up});
  TRAINER_FLOAT_DISPATCH(gate.dtype, "swiglu_forward", TRAINER_PACK_WIDTH_DISPATCH(vec, T, {
    swiglu_forward_kernel<V, T><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const T*>(gate.data),
        static_cast<const T*>(up.data), n);
  }));
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
  const bool vec = pack::packable(n, {&dgate, &dup, &dout, &gate, &up});
  TRAINER_FLOAT_DISPATCH(gate.dtype, "swiglu_backward", TRAINER_PACK_WIDTH_DISPATCH(vec, T, {
    swiglu_backward_kernel<V, T><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(dgate.data), static_cast<T*>(dup.data), static_cast<const T*>(dout.data),
        static_cast<const T*>(gate.data), static_cast<const T*>(up.data), n);
  }));
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
