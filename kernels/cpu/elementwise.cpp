// CPU elementwise ops: residual adds, accumulation, scaling, fill and same-dtype copy.
#include "kernels/elementwise.h"

#include "kernels/cpu/cpu_common.h"

namespace trainer::cpu {

namespace {

void check_numel(const Tensor& a, const Tensor& b, const char* op) {
  TRAINER_CHECK(a.numel() == b.numel(), "{}: {} and {} differ in numel", op, a.str(), b.str());
}

}  // namespace

void add(Context& ctx, Tensor out, Tensor a, Tensor b) {
  check_numel(out, a, "add");
  check_numel(out, b, "add");
  float* o = f32(out, "add", "out");
  const float* x = f32(a, "add", "a");
  const float* y = f32(b, "add", "b");
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void accumulate(Context& ctx, Tensor out, Tensor a) {
  check_numel(out, a, "accumulate");
  float* o = f32(out, "accumulate", "out");
  const float* x = f32(a, "accumulate", "a");
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] += x[i];
}

void scale(Context& ctx, Tensor out, float s) {
  float* o = f32(out, "scale", "out");
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] *= s;
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
  float* o = f32(out, "fill", "out");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = value;
}

void copy(Context& ctx, Tensor dst, Tensor src) {
  TRAINER_CHECK(dst.device == Device::cpu && src.device == Device::cpu,
                "copy: {} <- {} must both be CPU tensors", dst.str(), src.str());
  TRAINER_CHECK(dst.dtype == src.dtype,
                "copy: {} <- {}: dtypes differ; conversions go through cast() (kernels/cast.h)",
                dst.str(), src.str());
  check_numel(dst, src, "copy");
  TRAINER_CHECK(dst.contiguous() && src.contiguous(), "copy: {} <- {} must be contiguous",
                dst.str(), src.str());
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
