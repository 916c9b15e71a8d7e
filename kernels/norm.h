// Whole-tensor sums in double. The squared L2 norm is the building block of the
// global gradient norm (shards add their partial sums, then one all-reduce);
// the plain sum adds a micro-batch's token losses on the device, so a step
// reads its loss once instead of waiting for the device after every forward.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (1) f32 += sum(x^2) over all of x (fp32), accumulated in double on the CPU     */ \
  void sum_of_squares(Context& ctx, Tensor out, Tensor x);                                   \
  /* out (1) f64 += sum(x) over all of x, in double                                     */ \
  void sum_values(Context& ctx, Tensor out, Tensor x);                                       \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void sum_of_squares(Context& ctx, Tensor out, Tensor x) {
  TRAINER_DISPATCH(ctx, sum_of_squares, out, x);
}
inline void sum_values(Context& ctx, Tensor out, Tensor x) {
  TRAINER_DISPATCH(ctx, sum_values, out, x);
}
}  // namespace trainer
