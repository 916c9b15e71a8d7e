// Dtype conversion with an optional scale (fp32/bf16/fp16/fp8 E4M3/E5M2, any to any),
// and the reductions mixed precision needs: amax for fp8 scaling, a non-finite check
// for fp16 loss scaling. Element conversions are those of kernels/numeric.h.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* dst = convert(float(src) * scale[0]); written. Any shape, same numel (when either is  */ \
  /* strided: the same shape, element (i,j,..) to (i,j,..), so a transposed view of src    */ \
  /* gives a cast-transpose). dtypes f32, bf16, f16, e4m3, e5m2. scale: empty (no scaling) */ \
  /* or a (1) f32 tensor on the same device holding the multiplier; the product is one     */ \
  /* fp32 multiply (no FMA) before the single rounding into dst: fp8 encodes saturate,     */ \
  /* NaN -> canonical NaN. Quantise: scale = fp8 scale; dequantise: scale = 1/scale.       */ \
  /* dst may alias src only when both have the same element size and layout.              */ \
  void cast(Context& ctx, Tensor dst, Tensor src, Tensor scale);                             \
  /* out = max(out, max_i |x_i|); accumulated. out (1) f32, holding a value >= 0 (zero it  */ \
  /* at the start of a step); x any shape, any of the five float dtypes. NaNs in x are      */ \
  /* ignored (fmaxf semantics, as Transformer Engine); +-inf makes out inf.                */ \
  void amax(Context& ctx, Tensor out, Tensor x);                                             \
  /* flag = 1 if x holds an inf or NaN, else flag unchanged; accumulated. flag (1) f32      */ \
  /* (zero it first; OR over tensors by calling again); x any shape, float dtypes.         */ \
  void found_nonfinite(Context& ctx, Tensor flag, Tensor x);                                 \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void cast(Context& ctx, Tensor dst, Tensor src, Tensor scale = Tensor{}) {
  TRAINER_DISPATCH(ctx, cast, dst, src, scale);
}
inline void amax(Context& ctx, Tensor out, Tensor x) { TRAINER_DISPATCH(ctx, amax, out, x); }
inline void found_nonfinite(Context& ctx, Tensor flag, Tensor x) {
  TRAINER_DISPATCH(ctx, found_nonfinite, flag, x);
}
}  // namespace trainer
