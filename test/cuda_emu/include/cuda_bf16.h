// __nv_bfloat16 on the host: 16 bits of storage and CUDA's conversions (round
// to nearest even, a NaN becomes the canonical 0x7FFF as the GPU's cvt.rn.bf16
// gives it). Written from the bit patterns, not from kernels/numeric.h, so the
// emulator does not check the kernels against the CPU's own code.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f);
  operator float() const;
};
using nv_bfloat16 = __nv_bfloat16;

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  __nv_bfloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.__x = 0x7fff;
  } else {
    h.__x = static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return h;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = static_cast<uint32_t>(h.__x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16::__nv_bfloat16(float f) : __x(__float2bfloat16_rn(f).__x) {}
inline __nv_bfloat16::operator float() const { return __bfloat162float(*this); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) {
  __nv_bfloat16 h;
  h.__x = x;
  return h;
}
