// Cast to fp8 and transpose in one pass: the operand layouts an FP8 GEMM on Hopper
// needs (its tensor cores take only TN problems, so a linear layer's backward reads
// the transposes of the input, the weight and the output gradient). The element
// conversion is cast()'s (kernels/cast.h): one fp32 multiply by the scale, then the
// saturating round to nearest even of kernels/numeric.h.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out_t (C, R) = convert(src (R, C) * scale[0])^T, and out (R, C) the same codes        */ \
  /* untransposed (skipped when empty); written. src f32, bf16 or f16, contiguous; out,    */ \
  /* out_t e4m3 or e5m2 (one dtype), contiguous; scale empty (1) or a (1) f32 tensor on    */ \
  /* the same device: the quantisation scale.                                              */ \
  void cast_transpose(Context& ctx, Tensor out, Tensor out_t, Tensor src, Tensor scale);     \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void cast_transpose(Context& ctx, Tensor out, Tensor out_t, Tensor src, Tensor scale) {
  TRAINER_DISPATCH(ctx, cast_transpose, out, out_t, src, scale);
}
}  // namespace trainer
