// CPU elementwise ops: residual adds, accumulation, scaling, fill and copy.
#include "kernels/elementwise.h"

#include "kernels/cast.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"
#include "kernels/numeric.h"

namespace trainer::cpu {

namespace {

void check_numel(const Tensor& a, const Tensor& b, const char* op) {
  TRAINER_CHECK(a.numel() == b.numel(), "{}: {} and {} differ in numel", op, a.str(), b.str());
}

}  // namespace

void add(Context& ctx, Tensor out, Tensor a, Tensor b) {
  check_numel(out, a, "add");
  check_numel(out, b, "add");
  Staging st("add");
  float* o = st.out(out, "out");
  const float* x = st.in(a, "a");
  const float* y = st.in(b, "b");
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  st.commit();
}

void accumulate(Context& ctx, Tensor out, Tensor a) {
  check_numel(out, a, "accumulate");
  Staging st("accumulate");
  float* o = st.inout(out, "out");
  const float* x = st.in(a, "a");
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] += x[i];
  st.commit();
}

void scale(Context& ctx, Tensor out, float s) {
  Staging st("scale");
  float* o = st.inout(out, "out");
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] *= s;
  st.commit();
}

void fill(Context& ctx, Tensor out, float value) {
  TRAINER_CHECK(out.device == Device::cpu, "fill: {} is not a CPU tensor", out.str());
  TRAINER_CHECK(out.contiguous(), "fill: {} must be contiguous", out.str());
  const int64_t n = out.numel();
  if (value == 0.0f) {  // all-zero bits are zero in every dtype we have
    char* p = static_cast<char*>(out.data);
    const int64_t bytes = static_cast<int64_t>(out.nbytes());
#pragma omp parallel
    {
      int64_t b, e;
      split_range(bytes, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
      if (e > b) std::memset(p + b, 0, e - b);
    }
    return;
  }
  if (out.dtype == DType::bf16 || out.dtype == DType::f16) {
    // The value rounded once into the dtype, as a staged fp32 fill would store it.
    const uint16_t bits = out.dtype == DType::bf16 ? f32_to_bf16(value) : f32_to_f16(value);
    uint16_t* o = static_cast<uint16_t*>(out.data);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = bits;
    return;
  }
  TRAINER_CHECK(out.dtype == DType::f32, "fill: {} must be f32, bf16 or f16 for the value {}",
                out.str(), value);
  float* o = static_cast<float*>(out.data);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = value;
}

void copy(Context& ctx, Tensor dst, Tensor src) {
  TRAINER_CHECK(dst.device == Device::cpu && src.device == Device::cpu,
                "copy: {} <- {} must both be CPU tensors", dst.str(), src.str());
  check_numel(dst, src, "copy");
  TRAINER_CHECK(dst.contiguous() && src.contiguous(), "copy: {} <- {} must be contiguous",
                dst.str(), src.str());
  if (dst.dtype != src.dtype) {
    // One rounding into dst's dtype, the conversion of cast() (which refuses non-float
    // dtypes); flat views, since only the numels agree.
    const int64_t n = dst.numel();
    Tensor d = dst, s = src;
    d.ndim = s.ndim = 1;
    d.shape = s.shape = {n, 0, 0, 0};
    d.stride = s.stride = {1, 0, 0, 0};
    cpu::cast(ctx, d, s, Tensor{});
    return;
  }
  if (dst.data == src.data) return;
  char* d = static_cast<char*>(dst.data);
  const char* s = static_cast<const char*>(src.data);
  const int64_t bytes = static_cast<int64_t>(dst.nbytes());
#pragma omp parallel
  {
    int64_t b, e;
    split_range(bytes, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    if (e > b) std::memcpy(d + b, s + b, e - b);
  }
}

}  // namespace trainer::cpu
