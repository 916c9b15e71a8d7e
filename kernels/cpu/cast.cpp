// CPU dtype conversion (cast), amax and the non-finite check, for the five float dtypes.
#include "kernels/cast.h"

#include <algorithm>
#include <cstdint>

#include "kernels/float_formats.h"
#include "kernels/numeric.h"

namespace trainer::cpu {

namespace {

using namespace float_format;

// Below this many elements a loop stays on the calling thread.
constexpr int64_t kParallelMin = 1 << 15;

// A view padded to 4 dims on the left, walked as rows of its last dim.
struct Rows {
  int64_t shape[4];
  int64_t stride[4];
  int64_t num_rows() const { return shape[0] * shape[1] * shape[2]; }
  int64_t row_offset(int64_t r) const {
    const int64_t i2 = r % shape[2], i1 = (r / shape[2]) % shape[1], i0 = r / (shape[2] * shape[1]);
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2];
  }
};

Rows rows_of(const Tensor& t) {
  Rows v{};
  const int pad = Tensor::kMaxDims - t.ndim;
  for (int d = 0; d < Tensor::kMaxDims; ++d) {
    v.shape[d] = d < pad ? 1 : t.shape[d - pad];
    v.stride[d] = d < pad ? 0 : t.stride[d - pad];
  }
  return v;
}

void check_cpu(const Tensor& t, const char* op, const char* name) {
  TRAINER_CHECK(t.device == Device::cpu, "{}: {} is {}, expected a CPU tensor", op, name, t.str());
}

template <class Src, class Dst, bool kScaled>
void cast_contiguous(typename Dst::T* dst, const typename Src::T* src, int64_t n, float s) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = Src::load(src[i]);
    dst[i] = Dst::store(kScaled ? x * s : x);
  }
}

template <class Src, class Dst, bool kScaled>
void cast_strided(const Tensor& dst, const Tensor& src, float s) {
  const Rows d = rows_of(dst), r = rows_of(src);
  const int64_t num_rows = d.num_rows(), cols = d.shape[3];
  auto* dp = static_cast<typename Dst::T*>(dst.data);
  const auto* sp = static_cast<const typename Src::T*>(src.data);
#pragma omp parallel for schedule(static) if (num_rows * cols >= kParallelMin)
  for (int64_t row = 0; row < num_rows; ++row) {
    typename Dst::T* drow = dp + d.row_offset(row);
    const typename Src::T* srow = sp + r.row_offset(row);
    for (int64_t j = 0; j < cols; ++j) {
      const float x = Src::load(srow[j * r.stride[3]]);
      drow[j * d.stride[3]] = Dst::store(kScaled ? x * s : x);
    }
  }
}

template <class Src, class Dst>
void cast_typed(const Tensor& dst, const Tensor& src, bool scaled, float s) {
  if (dst.contiguous() && src.contiguous()) {
    auto* dp = static_cast<typename Dst::T*>(dst.data);
    const auto* sp = static_cast<const typename Src::T*>(src.data);
    if (scaled)
      cast_contiguous<Src, Dst, true>(dp, sp, src.numel(), s);
    else
      cast_contiguous<Src, Dst, false>(dp, sp, src.numel(), s);
  } else if (scaled) {
    cast_strided<Src, Dst, true>(dst, src, s);
  } else {
    cast_strided<Src, Dst, false>(dst, src, s);
  }
}

// Folds reduce(acc, bits of |x_i|) over every element of x, from 0. The bits of a
// non-negative float order like its value, with NaNs above +inf, so an integer max
// is a float max that every thread order gives alike.
template <class Fmt, class Reduce>
uint32_t reduce_abs_bits(const Tensor& x, Reduce reduce) {
  const Rows v = rows_of(x);
  const int64_t num_rows = v.num_rows(), cols = v.shape[3];
  const auto* xp = static_cast<const typename Fmt::T*>(x.data);
  uint32_t result = 0;
#pragma omp parallel if (num_rows * cols >= kParallelMin)
  {
    uint32_t local = 0;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < num_rows; ++row) {
      const typename Fmt::T* xrow = xp + v.row_offset(row);
      const int64_t step = v.stride[3];
      for (int64_t j = 0; j < cols; ++j) local = reduce(local, f32_bits(Fmt::load(xrow[j * step])) & 0x7FFFFFFFu);
    }
#pragma omp critical
    result = reduce(result, local);
  }
  return result;
}

float* scalar_f32(const Tensor& t, const char* op, const char* name) {
  check_cpu(t, op, name);
  TRAINER_CHECK(t.dtype == DType::f32 && t.numel() == 1, "{}: {} is {}, expected (1) fp32", op,
                name, t.str());
  return static_cast<float*>(t.data);
}

}  // namespace

void cast(Context& ctx, Tensor dst, Tensor src, Tensor scale) {
  check_cpu(dst, "cast", "dst");
  check_cpu(src, "cast", "src");
  TRAINER_CHECK(dst.numel() == src.numel(), "cast: dst {} vs src {}", dst.str(), src.str());
  if (!(dst.contiguous() && src.contiguous())) {
    bool same = dst.ndim == src.ndim;
    for (int d = 0; same && d < dst.ndim; ++d) same = dst.shape[d] == src.shape[d];
    TRAINER_CHECK(same, "cast: a strided dst {} or src {} needs equal shapes", dst.str(), src.str());
  }
  const bool scaled = !scale.empty();
  const float s = scaled ? *scalar_f32(scale, "cast", "scale") : 1.0f;
  if (src.numel() == 0) return;
  with_format(src.dtype, "cast", "src", [&](auto src_fmt) {
    with_format(dst.dtype, "cast", "dst", [&](auto dst_fmt) {
      cast_typed<decltype(src_fmt), decltype(dst_fmt)>(dst, src, scaled, s);
    });
  });
}

void amax(Context& ctx, Tensor out, Tensor x) {
  float* o = scalar_f32(out, "amax", "out");
  check_cpu(x, "amax", "x");
  TRAINER_CHECK(!(*o < 0.0f), "amax: out holds {}, expected a value >= 0", *o);
  if (x.numel() == 0) return;
  // fmaxf(m, NaN) == m: a NaN element counts as 0.
  auto reduce = [](uint32_t m, uint32_t a) { return std::max(m, a > 0x7F800000u ? 0u : a); };
  uint32_t bits = 0;
  with_format(x.dtype, "amax", "x", [&](auto fmt) { bits = reduce_abs_bits<decltype(fmt)>(x, reduce); });
  const float m = f32_from_bits(bits);
  if (m > *o || *o != *o) *o = m;
}

void found_nonfinite(Context& ctx, Tensor flag, Tensor x) {
  float* f = scalar_f32(flag, "found_nonfinite", "flag");
  check_cpu(x, "found_nonfinite", "x");
  if (x.numel() == 0) return;
  // Any |x| with all exponent bits set (inf or NaN) is >= 0x7F800000.
  auto reduce = [](uint32_t m, uint32_t a) { return std::max(m, a); };
  uint32_t bits = 0;
  with_format(x.dtype, "found_nonfinite", "x",
              [&](auto fmt) { bits = reduce_abs_bits<decltype(fmt)>(x, reduce); });
  if (bits >= 0x7F800000u) *f = 1.0f;
}

}  // namespace trainer::cpu
