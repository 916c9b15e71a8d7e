// Causal scaled-dot-product attention with grouped-query heads: query head h reads
// KV head h / (H / Hkv); scale 1/sqrt(D). Forward saves only the log-sum-exp of
// each row, so memory is O(T) per head; backward recomputes the probabilities
// (as FlashAttention does).
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (B, T, H, D) = softmax(q k^T / sqrt(D), causal) v; lse (B, H, T) f32; written    */ \
  /* q (B, T, H, D), k, v (B, T, Hkv, D), H a multiple of Hkv                             */ \
  void attention_forward(Context& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v); \
  /* dq (B, T, H, D), dk, dv (B, T, Hkv, D) written                                       */ \
  void attention_backward(Context& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout,        \
                          Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse);             \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void attention_forward(Context& ctx, Tensor out, Tensor lse, Tensor q, Tensor k,
                              Tensor v) {
  TRAINER_DISPATCH(ctx, attention_forward, out, lse, q, k, v);
}
inline void attention_backward(Context& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout,
                               Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse) {
  TRAINER_DISPATCH(ctx, attention_backward, dq, dk, dv, dout, q, k, v, out, lse);
}
}  // namespace trainer
