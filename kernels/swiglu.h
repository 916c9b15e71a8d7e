// SwiGLU gate of the Llama MLP: silu(gate) * up, with gate and up from separate linears.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (N, F) = silu(gate (N, F)) * up (N, F); written                                  */ \
  void swiglu_forward(Context& ctx, Tensor out, Tensor gate, Tensor up);                     \
  /* dgate, dup (N, F) written from dout (N, F)                                           */ \
  void swiglu_backward(Context& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate,     \
                       Tensor up);                                                           \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void swiglu_forward(Context& ctx, Tensor out, Tensor gate, Tensor up) {
  TRAINER_DISPATCH(ctx, swiglu_forward, out, gate, up);
}
inline void swiglu_backward(Context& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate,
                            Tensor up) {
  TRAINER_DISPATCH(ctx, swiglu_backward, dgate, dup, dout, gate, up);
}
}  // namespace trainer
