// Contiguous bf16/fp16 <-> fp32 conversion loops, on the calling thread, for
// whatever moves 16-bit floats in bulk on the CPU: the ops' staging, ops that
// convert a row at a time, and CPU ranks reducing bf16/fp16 buffers. fp16 uses
// the CPU's F16C instructions where it has them (the portable branch-free
// conversions of kernels/numeric.h do not vectorise in a baseline x86-64
// build); bf16 loops are written with selects so every clone vectorises.
// Results are bit-identical to numeric.h's conversions (fp16 blocks holding a
// NaN take the portable path, which canonicalises NaNs as the GPU does).
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace trainer::cpu {

void f16_to_f32_n(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_n(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_n(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16_n(const float* src, uint16_t* dst, int64_t n);

// n elements of a bf16 or fp16 buffer to fp32 (exact), and back (one rounding).
void to_f32(DType dtype, const void* src, float* dst, int64_t n);
void from_f32(DType dtype, const float* src, void* dst, int64_t n);

}  // namespace trainer::cpu
