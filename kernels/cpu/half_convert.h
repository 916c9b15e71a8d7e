// Contiguous fp16 <-> fp32 conversion loops for the CPU backend's staging,
// with the CPU's F16C instructions where it has them: the portable
// branch-free conversions of kernels/numeric.h do not vectorise in a
// baseline x86-64 build, and fp16 staging moves every activation each op.
// Results are bit-identical to f16_to_f32 / f32_to_f16 (blocks holding a NaN
// take the portable path, which canonicalises NaNs as the GPU does).
#pragma once

#include <cstdint>

namespace trainer::cpu {

void f16_to_f32_n(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_n(const float* src, uint16_t* dst, int64_t n);

}  // namespace trainer::cpu
