// RMSNorm over the last dim (Llama): no mean, no bias. rstd is saved for backward.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (N, C) = inp * rstd * weight (C); rstd (N) f32 = 1/sqrt(mean(inp^2) + eps); written */ \
  void rmsnorm_forward(Context& ctx, Tensor out, Tensor rstd, Tensor inp, Tensor weight,     \
                       float eps);                                                           \
  /* dinp (N, C) written; dweight (C) accumulated                                          */ \
  void rmsnorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dout, Tensor inp,  \
                        Tensor weight, Tensor rstd);                                         \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void rmsnorm_forward(Context& ctx, Tensor out, Tensor rstd, Tensor inp, Tensor weight,
                            float eps) {
  TRAINER_DISPATCH(ctx, rmsnorm_forward, out, rstd, inp, weight, eps);
}
inline void rmsnorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dout, Tensor inp,
                             Tensor weight, Tensor rstd) {
  TRAINER_DISPATCH(ctx, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd);
}
}  // namespace trainer
