// Small elementwise ops the layers and the loop need (residual adds, zeroing, scaling).
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out = a + b (same numel); written; out may alias a or b                             */ \
  void add(Context& ctx, Tensor out, Tensor a, Tensor b);                                    \
  /* out += a                                                                              */ \
  void accumulate(Context& ctx, Tensor out, Tensor a);                                       \
  /* out *= s                                                                              */ \
  void scale(Context& ctx, Tensor out, float s);                                             \
  /* out = value (value 0 zeroes any dtype; other values: f32, and bf16/f16 on the CPU)    */ \
  void fill(Context& ctx, Tensor out, float value);                                          \
  /* dst = src, same numel; converts when the dtypes differ (round to nearest even)        */ \
  void copy(Context& ctx, Tensor dst, Tensor src);                                           \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void add(Context& ctx, Tensor out, Tensor a, Tensor b) {
  TRAINER_DISPATCH(ctx, add, out, a, b);
}
inline void accumulate(Context& ctx, Tensor out, Tensor a) {
  TRAINER_DISPATCH(ctx, accumulate, out, a);
}
inline void scale(Context& ctx, Tensor out, float s) { TRAINER_DISPATCH(ctx, scale, out, s); }
inline void fill(Context& ctx, Tensor out, float value) {
  TRAINER_DISPATCH(ctx, fill, out, value);
}
inline void copy(Context& ctx, Tensor dst, Tensor src) { TRAINER_DISPATCH(ctx, copy, dst, src); }
}  // namespace trainer
