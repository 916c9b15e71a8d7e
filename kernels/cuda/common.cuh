// Helpers shared by the CUDA op files: argument checks for launchers, element
// conversion (fp32 / bf16 / fp16, accumulate in fp32), block reductions, grid sizing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/context.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_state.h"
#include "kernels/op_scratch.h"
#include "kernels/tensor.h"

namespace trainer::cuda {

constexpr int kMaxGridY = kCudaMaxGridY;  // gridDim.y and gridDim.z limit

inline CudaState& state_of(Context& ctx) {
  TRAINER_CHECK(ctx.device == Device::cuda && ctx.cuda != nullptr,
                "CUDA op called without a CUDA context");
  return *ctx.cuda;
}

// On the GPU, with data, aligned to its element size (the kernels load whole
// elements; a packed buffer sliced at a byte offset would fault or misread).
inline void check_gpu_data(const Tensor& t, const char* op, const char* name) {
  TRAINER_CHECK(t.device == Device::cuda, "{}: {} {} is not on the GPU", op, name, t.str());
  TRAINER_CHECK(t.numel() == 0 || t.data != nullptr, "{}: {} has no data", op, name);
  TRAINER_CHECK(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0,
                "{}: {} {} at {} is not aligned to its {}-byte elements", op, name, t.str(),
                t.data, dtype_size(t.dtype));
}

// Every tensor an op touches: on the GPU and contiguous (ops index flat memory).
inline void check_cuda(const Tensor& t, const char* op, const char* name) {
  check_gpu_data(t, op, name);
  TRAINER_CHECK(t.contiguous(), "{}: {} {} is not contiguous", op, name, t.str());
}

inline void check_dtype(const Tensor& t, DType dtype, const char* op, const char* name) {
  TRAINER_CHECK(t.dtype == dtype, "{}: {} {} must be {}", op, name, t.str(), dtype_name(dtype));
}

inline void check_float_dtype(const Tensor& t, const char* op, const char* name) {
  TRAINER_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16,
                "{}: {} {} must be fp32, bf16 or fp16", op, name, t.str());
}

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never
// more than gridDim.x allows.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = int64_t{1} << 16) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
// Round to nearest even, as kernels/numeric.h (the CPU backend's conversions) does.
template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over the block; every thread of the block must call it (blockDim.x a
// multiple of 32, <= 1024); all threads get the result. `shared` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < num_warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < num_warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace trainer::cuda

// Runs BODY with `T` bound to the element type of a fp32/bf16/fp16 tensor.
#define TRAINER_FLOAT_DISPATCH(dtype, op, ...)                                        \
  do {                                                                               \
    if ((dtype) == ::trainer::DType::f32) {                                          \
      using T = float;                                                               \
      __VA_ARGS__;                                                                   \
    } else if ((dtype) == ::trainer::DType::bf16) {                                  \
      using T = __nv_bfloat16;                                                       \
      __VA_ARGS__;                                                                   \
    } else if ((dtype) == ::trainer::DType::f16) {                                   \
      using T = __half;                                                              \
      __VA_ARGS__;                                                                   \
    } else {                                                                         \
      TRAINER_CHECK(false, "{}: dtype {} not supported", op, ::trainer::dtype_name(dtype)); \
    }                                                                                \
  } while (0)

// Inside TRAINER_FLOAT_DISPATCH: runs BODY with `W` bound to the element type of
// a per-channel parameter (norm weight, bias), which is either fp32 (the master
// copy, as mixed precision keeps vectors) or the activations' own type `T`.
// Only those two: each extra pairing is one more kernel instantiation to build.
#define TRAINER_PARAM_DISPATCH(dtype, act_dtype, op, name, ...)                        \
  do {                                                                               \
    if ((dtype) == ::trainer::DType::f32) {                                          \
      using W = float;                                                               \
      __VA_ARGS__;                                                                   \
    } else if ((dtype) == (act_dtype)) {                                             \
      using W = T;                                                                   \
      __VA_ARGS__;                                                                   \
    } else {                                                                         \
      TRAINER_CHECK(false, "{}: {} is {}; expected fp32 or the activations' {}", op, name, \
                    ::trainer::dtype_name(dtype), ::trainer::dtype_name(act_dtype)); \
    }                                                                                \
  } while (0)
