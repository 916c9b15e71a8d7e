// Squared L2 norm of a tensor, the building block of the global gradient norm
// (shards add their partial sums, then one all-reduce).
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (1) f32 += sum(x^2) over all of x (fp32), accumulated in double on the CPU     */ \
  void sum_of_squares(Context& ctx, Tensor out, Tensor x);                                   \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void sum_of_squares(Context& ctx, Tensor out, Tensor x) {
  TRAINER_DISPATCH(ctx, sum_of_squares, out, x);
}
}  // namespace trainer
