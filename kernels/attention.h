// Causal scaled-dot-product attention with grouped-query heads: query head h reads
// KV head h / (H / Hkv); scale 1/sqrt(D). Forward saves only the log-sum-exp of
// each row, so memory is O(T) per head; backward recomputes the probabilities
// (as FlashAttention does). The queries may be a block of a longer sequence
// (context parallelism): query i sits at position q_offset + i of the Tk keys
// and sees keys [0, q_offset + i]; q_offset = 0 with Tq = Tk is plain causal
// self-attention.
// Document masking (Megatron's --reset-attention-mask): doc_start (B, Tq) int32,
// row stride free, holds for each query the key index its document starts at,
// and the query then sees keys [doc_start, q_offset + i] only; each value must
// lie in [0, q_offset + i]. An empty doc_start is 0 for every query.
// Sliding window (Mistral's sliding_window): window > 0 also hides the keys
// before q_offset + i - window + 1, so a query sees itself and at most
// window - 1 keys before it; 0 is no window.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (B, Tq, H, D) = softmax(q k^T / sqrt(D), causal) v; lse (B, H, Tq) f32; written */  \
  /* q (B, Tq, H, D), k, v (B, Tk, Hkv, D), H a multiple of Hkv, q_offset + Tq <= Tk      */ \
  void attention_forward(Context& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, \
                         int64_t q_offset, Tensor doc_start = {}, int64_t window = 0);       \
  /* dq (B, Tq, H, D), dk, dv (B, Tk, Hkv, D) written (keys no query sees get 0)          */ \
  void attention_backward(Context& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout,        \
                          Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,              \
                          int64_t q_offset, Tensor doc_start = {}, int64_t window = 0);      \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void attention_forward(Context& ctx, Tensor out, Tensor lse, Tensor q, Tensor k,
                              Tensor v, int64_t q_offset = 0, Tensor doc_start = {},
                              int64_t window = 0) {
  TRAINER_DISPATCH(ctx, attention_forward, out, lse, q, k, v, q_offset, doc_start, window);
}
inline void attention_backward(Context& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout,
                               Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,
                               int64_t q_offset = 0, Tensor doc_start = {}, int64_t window = 0) {
  TRAINER_DISPATCH(ctx, attention_backward, dq, dk, dv, dout, q, k, v, out, lse, q_offset,
                   doc_start, window);
}
}  // namespace trainer
