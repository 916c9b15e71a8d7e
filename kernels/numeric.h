// Bit-exact conversions between fp32 and the narrow formats (bf16, fp16, fp8 E4M3/E5M2),
// shared by the CPU backend and CUDA kernels (host and device, no CUDA headers).
//
// fp32 -> narrow: round to nearest, ties to even, subnormals kept (no flush). The
// results match CUDA's conversions bit for bit:
//   f32_to_bf16 == __float2bfloat16_rn   (NaN -> 0x7FFF, overflow -> +-inf)
//   f32_to_f16  == __float2half_rn       (NaN -> 0x7FFF, overflow -> +-inf)
//   f32_to_e4m3 == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)
//   f32_to_e5m2 == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)
// The fp8 encoders saturate: any finite value that rounds above the largest finite
// code, and +-inf, become +-max (E4M3 448, E5M2 57344; E5M2 has infinities but
// SATFINITE never produces them, as cuda_fp8.hpp's host path and PTX
// cvt.rn.satfinite both do). NaN of any sign becomes the positive NaN 0x7F.
// A value at or below half the smallest subnormal becomes a zero of x's sign.
//
// narrow -> fp32 is exact; a NaN code decodes to a NaN of the same sign (fp16/bf16/
// E5M2 keep the payload bits; E4M3's NaN is 0x7F/0xFF only).
#pragma once

#include <cstdint>
#include <cstring>

#ifndef TRAINER_HOST_DEVICE
#if defined(__CUDACC__)
#define TRAINER_HOST_DEVICE __host__ __device__
#else
#define TRAINER_HOST_DEVICE
#endif
#endif

namespace trainer {

inline constexpr float kBF16Max = 3.38953139e38f;  // 0x7F7F
inline constexpr float kF16Max = 65504.0f;         // 0x7BFF
inline constexpr float kE4M3Max = 448.0f;          // 0x7E
inline constexpr float kE5M2Max = 57344.0f;        // 0x7B

inline constexpr uint16_t kBF16NaN = 0x7FFF;  // what CUDA and we produce for a NaN input
inline constexpr uint16_t kF16NaN = 0x7FFF;
inline constexpr uint8_t kFp8NaN = 0x7F;  // both fp8 formats

TRAINER_HOST_DEVICE inline uint32_t f32_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

TRAINER_HOST_DEVICE inline float f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

namespace numeric_detail {

// Rounds a non-negative fp32 (its bits, not NaN) to a format with kExpBits exponent
// bits (bias 2^(kExpBits-1) - 1) and kManBits mantissa bits, ties to even, as if the
// exponent range were unbounded above: the caller compares the code with its largest
// finite code to decide between infinity and saturation (+inf lands above it).
//
// One formula for normals and subnormals, branch-free so CPU loops stay predictable
// and GPU warps do not diverge: the value is sig * 2^(e - 150) with the implicit bit
// in sig; the code is (biased exponent - 1) << kManBits plus sig shifted down to the
// target's unit. In the subnormal range the exponent part is 0 and the shift grows.
// A rounding carry out of the mantissa lands in the exponent field, which is exactly
// the next binade (the largest subnormal rounds up to the smallest normal).
template <int kExpBits, int kManBits>
TRAINER_HOST_DEVICE inline uint32_t round_magnitude(uint32_t abs_bits) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kDropped = 23 - kManBits;  // fp32 mantissa bits below the target's
  const int f32_exp = static_cast<int>(abs_bits >> 23);
  const uint32_t sig = (abs_bits & 0x7FFFFFu) | (f32_exp != 0 ? 0x800000u : 0u);
  const int exp = (f32_exp != 0 ? f32_exp : 1) - 127 + kBias;  // target biased exponent
  const int below = exp < 1 ? 1 - exp : 0;                      // binades below the normals
  // sig < 2^24, so any shift past 25 gives code 0 and rem < half: clamping keeps shifts legal.
  const int shift = kDropped + (below < 31 - kDropped ? below : 31 - kDropped);
  const uint32_t base = exp > 1 ? static_cast<uint32_t>(exp - 1) << kManBits : 0u;
  // Ties to even without a data-dependent branch: with r the dropped bits and q the
  // kept LSB, r + half - 1 + q carries into the kept bits exactly when r > half, or
  // r == half and q is odd (base has no bits below kManBits >= 2, so q is sig's).
  const uint32_t half = 1u << (shift - 1);
  const uint32_t lsb = (sig >> shift) & 1u;
  return base + ((sig + (half - 1u) + lsb) >> shift);
}

// Decodes a code of an IEEE-style format; kHasInf false means the all-ones
// exponent holds normal numbers except the all-ones mantissa, which is NaN (E4M3).
template <int kExpBits, int kManBits, bool kHasInf>
TRAINER_HOST_DEVICE inline float decode(uint32_t code) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr uint32_t kExpMask = (1u << kExpBits) - 1u;
  constexpr uint32_t kManMask = (1u << kManBits) - 1u;
  const uint32_t sign = ((code >> (kExpBits + kManBits)) & 1u) << 31;
  const uint32_t exp = (code >> kManBits) & kExpMask;
  const uint32_t man = code & kManMask;
  if (exp == kExpMask) {
    if constexpr (kHasInf) return f32_from_bits(sign | 0x7F800000u | (man << (23 - kManBits)));
    if (man == kManMask) return f32_from_bits(sign | 0x7FC00000u);
  }
  if (exp == 0) {
    // man * 2^(1 - bias - kManBits): both factors and the product are exact fp32 normals.
    constexpr uint32_t kUnitBits = static_cast<uint32_t>(127 + 1 - kBias - kManBits) << 23;
    const float magnitude = static_cast<float>(man) * f32_from_bits(kUnitBits);
    return f32_from_bits(sign | f32_bits(magnitude));
  }
  return f32_from_bits(sign | ((exp - kBias + 127) << 23) | (man << (23 - kManBits)));
}

}  // namespace numeric_detail

// ---- bf16: the top half of an fp32, so subnormals and the exponent range carry over.
TRAINER_HOST_DEVICE inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  // Adding 0x7FFF plus the kept LSB carries exactly when the dropped half is above
  // the tie, or at the tie with an odd LSB; a carry into the exponent is correct
  // (up to +-inf past the largest finite value).
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? kBF16NaN : rounded);
}

TRAINER_HOST_DEVICE inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

// ---- fp16 (IEEE binary16): 5 exponent bits, bias 15, 10 mantissa bits.
TRAINER_HOST_DEVICE inline uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t abs_bits = u & 0x7FFFFFFFu;
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t code = numeric_detail::round_magnitude<5, 10>(abs_bits);
  code = code > 0x7BFFu ? 0x7C00u : code;  // rounded past 65504, or inf: infinity
  return static_cast<uint16_t>(abs_bits > 0x7F800000u ? kF16NaN : (sign | code));
}

TRAINER_HOST_DEVICE inline float f16_to_f32(uint16_t h) {
  return numeric_detail::decode<5, 10, true>(h);
}

// ---- fp8 E4M3 (OCP): bias 7, no infinities, NaN = 0x7F/0xFF, max 448.
TRAINER_HOST_DEVICE inline uint8_t f32_to_e4m3(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t abs_bits = u & 0x7FFFFFFFu;
  const uint32_t sign = (u >> 24) & 0x80u;
  uint32_t code = numeric_detail::round_magnitude<4, 3>(abs_bits);
  code = code > 0x7Eu ? 0x7Eu : code;  // SATFINITE: overflow and +-inf give +-448
  return static_cast<uint8_t>(abs_bits > 0x7F800000u ? kFp8NaN : (sign | code));
}

TRAINER_HOST_DEVICE inline float e4m3_to_f32(uint8_t c) {
  return numeric_detail::decode<4, 3, false>(c);
}

// ---- fp8 E5M2 (OCP): bias 15, IEEE-like with +-inf (0x7C/0xFC) and NaNs, max 57344.
TRAINER_HOST_DEVICE inline uint8_t f32_to_e5m2(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t abs_bits = u & 0x7FFFFFFFu;
  const uint32_t sign = (u >> 24) & 0x80u;
  uint32_t code = numeric_detail::round_magnitude<5, 2>(abs_bits);
  code = code > 0x7Bu ? 0x7Bu : code;  // SATFINITE: overflow and +-inf give +-57344, never inf
  return static_cast<uint8_t>(abs_bits > 0x7F800000u ? kFp8NaN : (sign | code));
}

TRAINER_HOST_DEVICE inline float e5m2_to_f32(uint8_t c) {
  return numeric_detail::decode<5, 2, true>(c);
}

// ---- fp32 -> format -> fp32: what the CPU backend uses to emulate a GPU storing in
// the narrow dtype (x rounded to the nearest representable value, as above).
TRAINER_HOST_DEVICE inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
TRAINER_HOST_DEVICE inline float round_to_f16(float x) { return f16_to_f32(f32_to_f16(x)); }
TRAINER_HOST_DEVICE inline float round_to_e4m3(float x) { return e4m3_to_f32(f32_to_e4m3(x)); }
TRAINER_HOST_DEVICE inline float round_to_e5m2(float x) { return e5m2_to_f32(f32_to_e5m2(x)); }

}  // namespace trainer
