// Shared by the MoE routing kernels (moe_route.cu, moe_plan.cu, moe_dispatch.cu).
// The CPU op takes every float argument as fp32, bf16 or fp16, each independently
// (kernels/cpu/staging.h: upcast exactly, fp32 math, one rounding on store); these
// helpers give the CUDA kernels the same freedom without a template per dtype
// combination: a run-time dtype code for small or mixed arguments, typed 16-byte
// packs for the bandwidth-bound row copies when the activations share a dtype.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"

namespace trainer::cuda::moe {

// The router kernels keep a few E-sized rows per warp in shared memory (12 bytes
// per expert and warp, at most 48 KiB per block), and moe_plan one E-sized
// histogram per block: more experts than this is refused rather than half-supported.
constexpr int64_t kMaxExperts = 4096;

enum FloatCode : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline int float_code(const Tensor& t, const char* op, const char* name) {
  switch (t.dtype) {
    case DType::f32: return kF32;
    case DType::bf16: return kBF16;
    case DType::f16: return kF16;
    default: break;
  }
  TRAINER_CHECK(false, "{}: {} {} must be fp32, bf16 or fp16", op, name, t.str());
  return kF32;
}

// The router ops' expert count: 1..kMaxExperts.
inline void check_experts(int64_t E, const char* op) {
  TRAINER_CHECK(E >= 1 && E <= kMaxExperts, "{}: {} experts; the CUDA router takes 1..{}", op, E,
                kMaxExperts);
}

// A float argument on the GPU, contiguous, fp32/bf16/fp16.
inline void check_float_arg(const Tensor& t, const char* op, const char* name) {
  check_cuda(t, op, name);
  float_code(t, op, name);
}

inline void check_i32_arg(const Tensor& t, const char* op, const char* name) {
  check_cuda(t, op, name);
  check_dtype(t, DType::i32, op, name);
}

// A float tensor whose dtype the kernel reads at run time. The code is the same
// for every thread, so the switch does not diverge; used where the rows are
// short (router rows of E, weights of K) or the dtypes of an op's arguments differ.
struct AnyFloat {
  void* data = nullptr;
  int code = kF32;

  __device__ __forceinline__ float load(int64_t i) const {
    if (code == kF32) return static_cast<const float*>(data)[i];
    if (code == kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    return __half2float(static_cast<const __half*>(data)[i]);
  }
  __device__ __forceinline__ void store(int64_t i, float v) const {
    if (code == kF32)
      static_cast<float*>(data)[i] = v;
    else if (code == kBF16)
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(v);
    else
      static_cast<__half*>(data)[i] = __float2half_rn(v);
  }
};

// An empty tensor gives data = nullptr (the kernels test for it: optional arguments).
inline AnyFloat any_float(const Tensor& t, const char* op, const char* name) {
  if (t.empty()) return {};
  return {t.data, float_code(t, op, name)};
}

// 16 bytes of T: one vector load or store. Only dereferenced at 16-byte-aligned
// addresses (the launchers check every base pointer and that a row is a whole
// number of packs).
template <class T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

inline bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data) % 16 == 0; }

// Sum over the warp in double; every lane gets the same bits (a fixed butterfly).
__device__ __forceinline__ double warp_sum_double(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

}  // namespace trainer::cuda::moe

