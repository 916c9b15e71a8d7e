// LayerNorm over the last dim (GPT-2). mean and rstd are saved for backward.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (N, C) = (inp - mean) * rstd * weight (C) + bias (C); mean, rstd (N) f32; written */ \
  void layernorm_forward(Context& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor inp,     \
                         Tensor weight, Tensor bias, float eps);                             \
  /* dinp (N, C) written; dweight, dbias (C) accumulated                                   */ \
  void layernorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias,           \
                          Tensor dout, Tensor inp, Tensor weight, Tensor mean, Tensor rstd); \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void layernorm_forward(Context& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor inp,
                              Tensor weight, Tensor bias, float eps) {
  TRAINER_DISPATCH(ctx, layernorm_forward, out, mean, rstd, inp, weight, bias, eps);
}
inline void layernorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias,
                               Tensor dout, Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  TRAINER_DISPATCH(ctx, layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
}
}  // namespace trainer
