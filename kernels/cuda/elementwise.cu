// Elementwise ops (kernels/elementwise.h) for fp32, bf16 and fp16: add, accumulate,
// scale, fill, copy with conversion. Arithmetic in fp32, one rounding on store.
#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <class TO, class TA>
__global__ void accumulate_kernel(TO* out, const TA* a, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<TO>(to_float(out[i]) + to_float(a[i]));
}

template <class T>
__global__ void scale_kernel(T* out, float s, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(to_float(out[i]) * s);
}

__global__ void fill_kernel(float* out, float value, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class TD, class TS>
__global__ void convert_kernel(TD* dst, const TS* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<TD>(to_float(src[i]));
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
  TRAINER_FLOAT_DISPATCH(out.dtype, "add", {
    add_kernel<T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const T*>(a.data), static_cast<const T*>(b.data), n);
  });
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
  TRAINER_FLOAT_DISPATCH(out.dtype, "accumulate", {
    using TO = T;
    TRAINER_FLOAT_DISPATCH(a.dtype, "accumulate", {
      accumulate_kernel<TO, T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
          static_cast<TO*>(out.data), static_cast<const T*>(a.data), n);
    });
  });
  CUDA_LAUNCH_CHECK();
}

void scale(Context& ctx, Tensor out, float s) {
  CudaState& st = state_of(ctx);
  check_cuda(out, "scale", "out");
  const int64_t n = out.numel();
  if (n == 0) return;
  TRAINER_FLOAT_DISPATCH(out.dtype, "scale", {
    scale_kernel<T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(static_cast<T*>(out.data),
                                                                       s, n);
  });
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
  fill_kernel<<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(static_cast<float*>(out.data),
                                                                 value, n);
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
  TRAINER_FLOAT_DISPATCH(dst.dtype, "copy", {
    using TD = T;
    TRAINER_FLOAT_DISPATCH(src.dtype, "copy", {
      convert_kernel<TD, T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
          static_cast<TD*>(dst.data), static_cast<const T*>(src.data), n);
    });
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
