// A per-token sigmoid gate on a branch: out[n, :] = sigmoid(gate[n]) * y[n, :],
// Qwen2-MoE's gated shared expert (its shared_expert_gate is a linear to one
// logit per token). gate is (N, 1) fp32 (the router's precision); y, out and
// their gradients f32, bf16 or f16, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (N, C) = sigmoid(gate (N, 1)) * y (N, C); written                                */ \
  void sigmoid_gate_forward(Context& ctx, Tensor out, Tensor y, Tensor gate);                \
  /* dy (N, C) = sigmoid(gate) * dout; dgate (N, 1) f32 = s (1 - s) * dout[n] . y[n] (the  */ \
  /* dot in double); both written                                                         */ \
  void sigmoid_gate_backward(Context& ctx, Tensor dy, Tensor dgate, Tensor dout, Tensor y,   \
                             Tensor gate);                                                   \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void sigmoid_gate_forward(Context& ctx, Tensor out, Tensor y, Tensor gate) {
  TRAINER_DISPATCH(ctx, sigmoid_gate_forward, out, y, gate);
}
inline void sigmoid_gate_backward(Context& ctx, Tensor dy, Tensor dgate, Tensor dout, Tensor y,
                                  Tensor gate) {
  TRAINER_DISPATCH(ctx, sigmoid_gate_backward, dy, dgate, dout, y, gate);
}
}  // namespace trainer
