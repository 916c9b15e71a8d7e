// Dtype conversion with an optional device-side scale, amax and the non-finite
// check (kernels/cast.h) for fp32, bf16, fp16, e4m3, e5m2, using the bit-exact
// conversions of kernels/numeric.h (the CPU backend's, so results agree bit for
// bit). amax / found_nonfinite reduce the bits of |x| with integer atomicMax:
// max is order-free, so the result is deterministic.
#include "kernels/cast.h"
#include "kernels/cuda/common.cuh"
#include "kernels/float_formats.h"
#include "kernels/numeric.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

using namespace float_format;

// A view padded to 4 dims on the left: flat index (row-major over shape) -> offset.
struct View4 {
  int64_t shape[4];
  int64_t stride[4];
  __device__ int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = 3; d >= 0; --d) {
      off += (i % shape[d]) * stride[d];
      i /= shape[d];
    }
    return off;
  }
};

View4 view4(const Tensor& t) {
  View4 v{};
  const int pad = Tensor::kMaxDims - t.ndim;
  for (int d = 0; d < Tensor::kMaxDims; ++d) {
    v.shape[d] = d < pad ? 1 : t.shape[d - pad];
    v.stride[d] = d < pad ? 0 : t.stride[d - pad];
  }
  return v;
}

// scale: null or a device pointer to the multiplier (one fp32 multiply, no FMA;
// NaNs pass through unchanged, so fp32 destinations match the CPU op bit for bit).
template <class Src, class Dst>
__global__ void cast_kernel(typename Dst::T* dst, View4 dv, const typename Src::T* src, View4 sv,
                            bool contiguous, const float* scale, int64_t n) {
  const float s = scale ? *scale : 1.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t si = contiguous ? i : sv.offset(i), di = contiguous ? i : dv.offset(i);
    float x = Src::load(src[si]);
    // A NaN keeps its bits, as x86 returns a quiet NaN operand of a multiply
    // (the GPU's multiply would give its canonical 0x7FFFFFFF instead).
    if (scale && !isnan(x)) x = __fmul_rn(x, s);
    dst[di] = Dst::store(x);
  }
}

// kNanAsZero: amax (fmaxf semantics: NaN counts as 0); else the non-finite check.
template <class Fmt, bool kNanAsZero>
__global__ void abs_bits_max_kernel(unsigned* result, const typename Fmt::T* x, View4 v,
                                    bool contiguous, int64_t n) {
  unsigned m = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    unsigned a = f32_bits(Fmt::load(x[contiguous ? i : v.offset(i)])) & 0x7FFFFFFFu;
    if (kNanAsZero && a > 0x7F800000u) a = 0;
    m = max(m, a);
  }
  for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (threadIdx.x % 32 == 0 && m) atomicMax(result, m);
}

__global__ void amax_finish_kernel(float* out, const unsigned* bits) {
  const float m = f32_from_bits(*bits);
  if (m > *out || *out != *out) *out = m;
}

__global__ void nonfinite_finish_kernel(float* flag, const unsigned* bits) {
  if (*bits >= 0x7F800000u) *flag = 1.0f;
}

void check_scalar(const Tensor& t, const char* op, const char* name) {
  check_cuda(t, op, name);
  TRAINER_CHECK(t.dtype == DType::f32 && t.numel() == 1, "{}: {} is {}, expected (1) fp32", op,
                name, t.str());
}

void check_on_gpu(const Tensor& t, const char* op, const char* name) { check_gpu_data(t, op, name); }

// Max over |x| bits into a fresh scratch word, then `finish` on the device.
template <bool kNanAsZero>
unsigned* reduce_abs_bits(CudaState& st, const Tensor& x, const char* op) {
  auto* bits = static_cast<unsigned*>(scratch(st, amax_scratch_bytes(), op));
  CUDA_CHECK(cudaMemsetAsync(bits, 0, sizeof(unsigned), st.stream));
  const int64_t n = x.numel();
  with_format(x.dtype, op, "x", [&](auto fmt) {
    using Fmt = decltype(fmt);
    abs_bits_max_kernel<Fmt, kNanAsZero><<<grid_for(n, kThreads, 4096), kThreads, 0, st.stream>>>(
        bits, static_cast<const typename Fmt::T*>(x.data), view4(x), x.contiguous(), n);
  });
  CUDA_LAUNCH_CHECK();
  return bits;
}

}  // namespace

void cast(Context& ctx, Tensor dst, Tensor src, Tensor scale) {
  const char* op = "cast";
  CudaState& st = state_of(ctx);
  check_on_gpu(dst, op, "dst");
  check_on_gpu(src, op, "src");
  TRAINER_CHECK(dst.numel() == src.numel(), "cast: dst {} vs src {}", dst.str(), src.str());
  const bool contiguous = dst.contiguous() && src.contiguous();
  if (!contiguous) {
    bool same = dst.ndim == src.ndim;
    for (int d = 0; same && d < dst.ndim; ++d) same = dst.shape[d] == src.shape[d];
    TRAINER_CHECK(same, "cast: a strided dst {} or src {} needs equal shapes", dst.str(), src.str());
  }
  if (!scale.empty()) check_scalar(scale, op, "scale");
  const int64_t n = src.numel();
  if (n == 0) return;
  const float* s = scale.empty() ? nullptr : static_cast<const float*>(scale.data);
  with_format(src.dtype, op, "src", [&](auto src_fmt) {
    with_format(dst.dtype, op, "dst", [&](auto dst_fmt) {
      using Src = decltype(src_fmt);
      using Dst = decltype(dst_fmt);
      cast_kernel<Src, Dst><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
          static_cast<typename Dst::T*>(dst.data), view4(dst),
          static_cast<const typename Src::T*>(src.data), view4(src), contiguous, s, n);
    });
  });
  CUDA_LAUNCH_CHECK();
}

// Unlike the CPU op, out's value is not checked to be >= 0 (that would need a sync).
void amax(Context& ctx, Tensor out, Tensor x) {
  CudaState& st = state_of(ctx);
  check_scalar(out, "amax", "out");
  check_on_gpu(x, "amax", "x");
  if (x.numel() == 0) return;
  const unsigned* bits = reduce_abs_bits<true>(st, x, "amax");
  amax_finish_kernel<<<1, 1, 0, st.stream>>>(static_cast<float*>(out.data), bits);
  CUDA_LAUNCH_CHECK();
}

void found_nonfinite(Context& ctx, Tensor flag, Tensor x) {
  CudaState& st = state_of(ctx);
  check_scalar(flag, "found_nonfinite", "flag");
  check_on_gpu(x, "found_nonfinite", "x");
  if (x.numel() == 0) return;
  const unsigned* bits = reduce_abs_bits<false>(st, x, "found_nonfinite");
  nonfinite_finish_kernel<<<1, 1, 0, st.stream>>>(static_cast<float*>(flag.data), bits);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
