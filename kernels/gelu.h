// GELU, tanh approximation as GPT-2 defines it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out = gelu(inp), any shape; written; out may alias inp                               */ \
  void gelu_forward(Context& ctx, Tensor out, Tensor inp);                                   \
  /* dinp = dout * gelu'(inp); written; dinp may alias dout                               */ \
  void gelu_backward(Context& ctx, Tensor dinp, Tensor dout, Tensor inp);                    \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void gelu_forward(Context& ctx, Tensor out, Tensor inp) {
  TRAINER_DISPATCH(ctx, gelu_forward, out, inp);
}
inline void gelu_backward(Context& ctx, Tensor dinp, Tensor dout, Tensor inp) {
  TRAINER_DISPATCH(ctx, gelu_backward, dinp, dout, inp);
}
}  // namespace trainer
