// Elementwise ops (kernels/elementwise.h) for fp32, bf16 and fp16: add, accumulate,
// scale, fill, copy with conversion. Arithmetic in fp32, one rounding on store.
//
// Bandwidth-bound: one bf16 per thread per load moves 64 bytes a warp
// instruction, an eighth of a 16-byte load's, so the load and store instructions,
// not DRAM, would set the pace. Where every base pointer is 16-byte aligned and n
// is whole packs of each dtype (pack::packable, per call) a thread moves V
// elements as 16-byte packs (V: the narrowest dtype's pack, so an fp32 side of a
// mixed pair moves two); otherwise V = 1. Each element's arithmetic is the same.
#include "kernels/cuda/pack.cuh"
#include "kernels/elementwise.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

// out = a + b; accumulate passes out as a (each step loads before it stores).
template <int V, class TO, class TA, class TB>
__global__ void add_kernel(TO* out, const TA* a, const TB* b, int64_t n) {
  pack::for_each_step<V>(n, [&](int64_t i) {
    pack::Floats<V> x = pack::load<V>(a + i);
    const pack::Floats<V> y = pack::load<V>(b + i);
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = x[j] + y[j];
    pack::store(out + i, x);
  });
}

template <int V, class T>
__global__ void scale_kernel(T* out, float s, int64_t n) {
  pack::for_each_step<V>(n, [&](int64_t i) {
    pack::Floats<V> x = pack::load<V>(out + i);
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = x[j] * s;
    pack::store(out + i, x);
  });
}

template <int V>
__global__ void fill_kernel(float* out, float value, int64_t n) {
  pack::Floats<V> x;
#pragma unroll
  for (int j = 0; j < V; ++j) x[j] = value;
  pack::for_each_step<V>(n, [&](int64_t i) { pack::store(out + i, x); });
}

template <int V, class TD, class TS>
__global__ void convert_kernel(TD* dst, const TS* src, int64_t n) {
  pack::for_each_step<V>(n, [&](int64_t i) { pack::store(dst + i, pack::load<V>(src + i)); });
}

}  // namespace

void add(Context& ctx, Tensor out, Tensor a, Tensor b) {
  CudaState& st = state_of(ctx);
  check_cuda(out, "add", "out");
  check_cuda(a, "add", "a");
  check_cuda(b, "add", "b");
  const int64_t n = out.numel();
  TRAINER_CHECK(a.numel() == n && b.numel() == n, "add: sizes {} {} {} differ", out.str(),
                a.str(), b.str());
  TRAINER_CHECK(a.dtype == out.dtype && b.dtype == out.dtype, "add: dtypes of {} {} {} differ",
                out.str(), a.str(), b.str());
  if (n == 0) return;
  const bool vec = pack::packable(n, {&out, &a, &b});
  TRAINER_FLOAT_DISPATCH(out.dtype, "add", TRAINER_PACK_WIDTH_DISPATCH(vec, T, {
    add_kernel<V, T, T, T><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const T*>(a.data), static_cast<const T*>(b.data), n);
  }));
  CUDA_LAUNCH_CHECK();
}

void accumulate(Context& ctx, Tensor out, Tensor a) {
  CudaState& st = state_of(ctx);
  check_cuda(out, "accumulate", "out");
  check_cuda(a, "accumulate", "a");
  const int64_t n = out.numel();
  TRAINER_CHECK(a.numel() == n, "accumulate: sizes {} {} differ", out.str(), a.str());
  check_float_dtype(a, "accumulate", "a");
  if (n == 0) return;
  const bool vec = pack::packable(n, {&out, &a});
  TRAINER_FLOAT_DISPATCH(out.dtype, "accumulate", {
    using TO = T;
    TRAINER_FLOAT_DISPATCH(a.dtype, "accumulate", {
      using X = pack::Narrowest<TO, T>;
      TRAINER_PACK_WIDTH_DISPATCH(vec, X, {
        add_kernel<V, TO, TO, T><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
            static_cast<TO*>(out.data), static_cast<const TO*>(out.data),
            static_cast<const T*>(a.data), n);
      });
    });
  });
  CUDA_LAUNCH_CHECK();
}

void scale(Context& ctx, Tensor out, float s) {
  CudaState& st = state_of(ctx);
  check_cuda(out, "scale", "out");
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool vec = pack::packable(n, {&out});
  TRAINER_FLOAT_DISPATCH(out.dtype, "scale", TRAINER_PACK_WIDTH_DISPATCH(vec, T, {
    scale_kernel<V, T><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), s, n);
  }));
  CUDA_LAUNCH_CHECK();
}

void fill(Context& ctx, Tensor out, float value) {
  CudaState& st = state_of(ctx);
  check_cuda(out, "fill", "out");
  const int64_t n = out.numel();
  if (n == 0) return;
  if (value == 0.0f) {
    // +0.0 is all-zero bits in every dtype we hold.
    CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), st.stream));
    return;
  }
  check_dtype(out, DType::f32, "fill", "out (non-zero value)");
  const bool vec = pack::packable(n, {&out});
  TRAINER_PACK_WIDTH_DISPATCH(vec, float, {
    fill_kernel<V><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
        static_cast<float*>(out.data), value, n);
  });
  CUDA_LAUNCH_CHECK();
}

void copy(Context& ctx, Tensor dst, Tensor src) {
  CudaState& st = state_of(ctx);
  check_cuda(dst, "copy", "dst");
  check_cuda(src, "copy", "src");
  const int64_t n = dst.numel();
  TRAINER_CHECK(src.numel() == n, "copy: sizes {} {} differ", dst.str(), src.str());
  if (n == 0) return;
  if (dst.dtype == src.dtype) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDeviceToDevice,
                               st.stream));
    return;
  }
  const bool vec = pack::packable(n, {&dst, &src});
  TRAINER_FLOAT_DISPATCH(dst.dtype, "copy", {
    using TD = T;
    TRAINER_FLOAT_DISPATCH(src.dtype, "copy", {
      using X = pack::Narrowest<TD, T>;
      TRAINER_PACK_WIDTH_DISPATCH(vec, X, {
        convert_kernel<V, TD, T><<<grid_for(n / V, kThreads), kThreads, 0, st.stream>>>(
            static_cast<TD*>(dst.data), static_cast<const T*>(src.data), n);
      });
    });
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
