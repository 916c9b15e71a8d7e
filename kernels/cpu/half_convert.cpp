// F16C fast paths of the fp16 conversions, chosen once by CPU features.
#include "kernels/cpu/half_convert.h"

#include "kernels/numeric.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TRAINER_HAVE_F16C_PATH 1
#endif

namespace trainer::cpu {

namespace {

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
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
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

}  // namespace trainer::cpu
