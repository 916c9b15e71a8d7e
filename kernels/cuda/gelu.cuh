// GELU (tanh approximation) and its derivative at one fp32 value: the elementwise
// ops (gelu.cu) and the fused linear + GELU fallbacks (linear_gelu.cu) share them.
#pragma once

#include "kernels/cuda/common.cuh"

namespace trainer::cuda {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu_value(float x) {
  const float cube = kGeluCubic * x * x * x;
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  // 1 - tanh^2 = sech^2 without cosh's overflow for large |x|.
  return 0.5f * (1.0f + th) +
         0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

}  // namespace trainer::cuda
