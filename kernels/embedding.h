// Token (and learned position) embedding lookup; vocab-parallel ready: a rank holds
// rows [vocab_start, vocab_start + V_local) of the table and ids outside give zero rows.
// positions (N) int32, when not empty, names each token's learned position row
// instead of pos_offset + n % T (documents packed in a sequence restarting at 0,
// Megatron's --reset-position-ids); pos_offset must then be 0.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                       \
  namespace NS {                                                                              \
  /* out (N, C) = wte[ids[n] - vocab_start] if that row is local, else 0                 */   \
  /*             (+ wpe[pos_offset + n % T] when wpe (T_max, C) is not empty); written    */  \
  void embedding_forward(Context& ctx, Tensor out, Tensor ids, Tensor wte, Tensor wpe,        \
                         int64_t T, int64_t pos_offset, int64_t vocab_start,                  \
                         Tensor positions = {});                                              \
  /* dwte (V_local, C) += dout rows scattered by id (local ids only); deterministic       */  \
  /* dwpe (T_max, C) += dout rows summed by position; skipped when empty                  */  \
  void embedding_backward(Context& ctx, Tensor dwte, Tensor dwpe, Tensor dout, Tensor ids,    \
                          int64_t T, int64_t pos_offset, int64_t vocab_start,                 \
                          Tensor positions = {});                                             \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void embedding_forward(Context& ctx, Tensor out, Tensor ids, Tensor wte, Tensor wpe,
                              int64_t T, int64_t pos_offset, int64_t vocab_start,
                              Tensor positions = {}) {
  TRAINER_DISPATCH(ctx, embedding_forward, out, ids, wte, wpe, T, pos_offset, vocab_start,
                   positions);
}
inline void embedding_backward(Context& ctx, Tensor dwte, Tensor dwpe, Tensor dout, Tensor ids,
                               int64_t T, int64_t pos_offset, int64_t vocab_start,
                               Tensor positions = {}) {
  TRAINER_DISPATCH(ctx, embedding_backward, dwte, dwpe, dout, ids, T, pos_offset, vocab_start,
                   positions);
}
}  // namespace trainer
