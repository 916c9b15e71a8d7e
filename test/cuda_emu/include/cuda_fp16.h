// __half on the host: 16 bits of storage and CUDA's conversions, from the bit
// patterns (round to nearest even; a NaN becomes the canonical 0x7FFF as the
// GPU's cvt.rn.f16 gives it). Not GCC's _Float16: without F16C it is a libgcc
// call per conversion, which made fp16 tests 15x slower than bf16 here; the
// emulator's tests check these against _Float16 on every code.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f);
  operator float() const;
};
using half = __half;

inline __half __float2half_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  __half h;
  if (x > 0x7f800000u) {
    h.__x = 0x7fff;
  } else if (x >= 0x477ff000u) {  // >= 65520: the tie above 65504 rounds to infinity
    h.__x = static_cast<unsigned short>(sign | 0x7c00u);
  } else if (x < 0x38800000u) {  // below 2^-14: a subnormal half, exact after scaling
    float v;
    std::memcpy(&v, &x, 4);
    h.__x = static_cast<unsigned short>(sign | static_cast<uint32_t>(std::nearbyint(v * 16777216.0f)));
  } else {
    const uint32_t mant = x & 0x7fffffu;
    uint32_t r = ((((x >> 23) - 112u) << 10) | (mant >> 13));
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) ++r;  // a carry moves into the exponent
    h.__x = static_cast<unsigned short>(sign | r);
  }
  return h;
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.__x & 0x8000u) << 16;
  const uint32_t e = (h.__x >> 10) & 0x1fu, m = h.__x & 0x3ffu;
  uint32_t bits;
  if (e == 0) {
    float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline __half::__half(float f) : __x(__float2half_rn(f).__x) {}
inline __half::operator float() const { return __half2float(*this); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short x) {
  __half h;
  h.__x = x;
  return h;
}
