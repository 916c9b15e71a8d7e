// Helpers shared by the CPU reference backend: argument checks, a vectorisable
// exp, per-thread scratch, the OpenMP work split and the BLAS threading policy.
#pragma once

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/tensor.h"

// Hot loops are compiled for AVX-512F, AVX2 and baseline x86-64; the loader
// picks one by CPU features at start-up (the project's flags carry no -march).
// Feature clones, not arch= clones: GCC dispatches those by CPU model, and a
// model newer than the compiler (this machine's Emerald Rapids) gets baseline.
// Only the AVX-512 clone vectorises the exp-based loops: -ftrapping-math (the
// default) stops GCC if-converting exp_approx's clamps without masked stores.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINER_CPU_CLONES \
  __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define TRAINER_CPU_CLONES
#endif
// Helpers called from the clones must be always_inline: GCC does not inline a
// baseline function into a clone built for other target options.
#define TRAINER_CPU_INLINE __attribute__((always_inline)) inline

namespace trainer::cpu {

// An fp32 tensor on the CPU, contiguous: for arguments that are fp32 by contract
// (AdamW's parameters, gradients and state). Float arguments that may also be bf16
// or fp16 go through Staging (staging.h).
inline float* f32(const Tensor& t, const char* op, const char* name) {
  TRAINER_CHECK(t.device == Device::cpu, "{}: {} is {}, expected a CPU tensor", op, name, t.str());
  TRAINER_CHECK(t.dtype == DType::f32, "{}: {} is {}, expected fp32", op, name, t.str());
  TRAINER_CHECK(t.contiguous(), "{}: {} {} must be contiguous", op, name, t.str());
  return static_cast<float*>(t.data);
}

inline const int32_t* i32(const Tensor& t, const char* op, const char* name) {
  TRAINER_CHECK(t.device == Device::cpu, "{}: {} is {}, expected a CPU tensor", op, name, t.str());
  TRAINER_CHECK(t.dtype == DType::i32, "{}: {} is {}, expected int32", op, name, t.str());
  TRAINER_CHECK(t.contiguous(), "{}: {} {} must be contiguous", op, name, t.str());
  return static_cast<const int32_t*>(t.data);
}
// An int32 output: i32's checks, writable.
inline int32_t* i32w(const Tensor& t, const char* op, const char* name) {
  return const_cast<int32_t*>(i32(t, op, name));
}

// exp(x) in fp32 with about 1 ulp error, branch-free so loops calling it
// vectorise (libm's expf does not without -ffast-math). Cephes' polynomial on
// x - n ln2, scaled by 2^n built in the exponent bits. exp(-inf) = 0, NaN
// propagates, and arguments above 88 saturate at exp(88) (~1.7e38) instead of inf.
TRAINER_CPU_INLINE float exp_approx(float x) {
  const float xc = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  const float e = p * std::bit_cast<float>(bits);
  return x < -87.0f ? 0.0f : e;
}

// [begin, end) of thread `idx` of `num` when n items are split evenly.
inline void split_range(int64_t n, int idx, int num, int64_t* begin, int64_t* end) {
  const int64_t base = n / num, rem = n % num;
  *begin = idx * base + std::min<int64_t>(idx, rem);
  *end = *begin + base + (idx < rem ? 1 : 0);
}

// Per-thread scratch that grows and is never freed: each OpenMP worker keeps
// its buffer across calls, so hot paths allocate only on first use (or when a
// larger shape arrives). `slot` separates buffers used at the same time.
inline float* thread_scratch(int slot, size_t n) {
  static thread_local std::vector<float> buffers[4];
  std::vector<float>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Threading policy: OpenBLAS runs single-threaded and every parallel loop,
// GEMMs included, uses the one OpenMP team (the GEMMs are split over it by the
// callers). Debian's default libopenblas is the pthread build, whose own
// workers would otherwise spin alongside OpenMP's on the same cores.
void blas_single_threaded();

}  // namespace trainer::cpu
