// The bulk 16-bit float conversions: bf16 loops cloned per ISA, fp16 through
// F16C fast paths chosen once by CPU features.
#include "kernels/cpu/half_convert.h"

#include <bit>

#include "kernels/cpu/cpu_common.h"
#include "kernels/numeric.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define TRAINER_HAVE_F16C_PATH 1
#endif

namespace trainer::cpu {

namespace {

// bf16 <-> fp32 as numeric.h converts, written with selects instead of branches
// so the loops vectorise in every clone.
TRAINER_CPU_INLINE float bf16_load(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

TRAINER_CPU_INLINE uint16_t bf16_store(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = 0u - static_cast<uint32_t>((u & 0x7FFFFFFFu) > 0x7F800000u);
  return static_cast<uint16_t>((rounded & ~nan) | (kBF16NaN & nan));
}

void f16_to_f32_portable(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_portable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

#ifdef TRAINER_HAVE_F16C_PATH
__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst,
                                                            int64_t n) {
  int64_t i = 0;
  const __m128i abs_mask = _mm_set1_epi16(0x7FFF), inf = _mm_set1_epi16(0x7C00);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    // NaN codes (|h| > 0x7C00; a signed compare is right as |h| <= 0x7FFF).
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, abs_mask), inf);
    if (_mm_movemask_epi8(nan)) {
      f16_to_f32_portable(src + i, dst + i, 8);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  f16_to_f32_portable(src + i, dst + i, n - i);
}

__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* src, uint16_t* dst,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) {
      f32_to_f16_portable(src + i, dst + i, 8);
      continue;
    }
    // Round to nearest even, overflow to infinity, subnormals exact: IEEE's
    // conversion, which is what f32_to_f16 implements.
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  f32_to_f16_portable(src + i, dst + i, n - i);
}

bool has_f16c() {
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  }();
  return yes;
}
#endif

}  // namespace

void f16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
#ifdef TRAINER_HAVE_F16C_PATH
  if (has_f16c()) return f16_to_f32_f16c(src, dst, n);
#endif
  f16_to_f32_portable(src, dst, n);
}

void f32_to_f16_n(const float* src, uint16_t* dst, int64_t n) {
#ifdef TRAINER_HAVE_F16C_PATH
  if (has_f16c()) return f32_to_f16_f16c(src, dst, n);
#endif
  f32_to_f16_portable(src, dst, n);
}

TRAINER_CPU_CLONES void bf16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_load(src[i]);
}

TRAINER_CPU_CLONES void f32_to_bf16_n(const float* src, uint16_t* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_store(src[i]);
}

void to_f32(DType dtype, const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  if (dtype == DType::bf16) bf16_to_f32_n(s, dst, n);
  else f16_to_f32_n(s, dst, n);
}

void from_f32(DType dtype, const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  if (dtype == DType::bf16) f32_to_bf16_n(src, d, n);
  else f32_to_f16_n(src, d, n);
}

}  // namespace trainer::cpu
