// Softmax cross-entropy in three passes so the vocabulary can be split across
// tensor-parallel ranks: a rank holds logit columns for global ids
// [vocab_start, vocab_start + Vp); columns with id >= vocab_size are padding and
// ignored; a target < 0 is ignored (loss 0, gradient 0). Between the passes the
// caller max-reduces maxv and sum-reduces sumexp and target_logit over the group;
// loss = log(sumexp) + maxv - target_logit. No rank ever holds full-vocab logits.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* maxv (N) = max over valid local columns of logits (N, Vp) (-inf if none); written   */ \
  void cross_entropy_max(Context& ctx, Tensor maxv, Tensor logits, int64_t vocab_start,      \
                         int64_t vocab_size);                                                \
  /* sumexp (N) = sum exp(logit - maxv) over valid local columns;                         */ \
  /* target_logit (N) = logits[n, targets[n] - vocab_start] when local, else 0; written   */ \
  void cross_entropy_sumexp(Context& ctx, Tensor sumexp, Tensor target_logit, Tensor logits, \
                            Tensor maxv, Tensor targets, int64_t vocab_start,                \
                            int64_t vocab_size);                                             \
  /* losses (N) = log(sumexp) + maxv - target_logit, 0 where targets < 0; written         */ \
  void cross_entropy_loss(Context& ctx, Tensor losses, Tensor maxv, Tensor sumexp,           \
                          Tensor target_logit, Tensor targets);                              \
  /* dlogits (N, Vp) = (softmax - onehot(target)) * dloss[n]; padding columns 0; written; */ \
  /* dlogits may alias logits (the usual case: the logits buffer is reused)               */ \
  void cross_entropy_backward(Context& ctx, Tensor dlogits, Tensor logits, Tensor maxv,      \
                              Tensor sumexp, Tensor targets, Tensor dloss,                   \
                              int64_t vocab_start, int64_t vocab_size);                      \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void cross_entropy_max(Context& ctx, Tensor maxv, Tensor logits, int64_t vocab_start,
                              int64_t vocab_size) {
  TRAINER_DISPATCH(ctx, cross_entropy_max, maxv, logits, vocab_start, vocab_size);
}
inline void cross_entropy_sumexp(Context& ctx, Tensor sumexp, Tensor target_logit, Tensor logits,
                                 Tensor maxv, Tensor targets, int64_t vocab_start,
                                 int64_t vocab_size) {
  TRAINER_DISPATCH(ctx, cross_entropy_sumexp, sumexp, target_logit, logits, maxv, targets,
                   vocab_start, vocab_size);
}
inline void cross_entropy_loss(Context& ctx, Tensor losses, Tensor maxv, Tensor sumexp,
                               Tensor target_logit, Tensor targets) {
  TRAINER_DISPATCH(ctx, cross_entropy_loss, losses, maxv, sumexp, target_logit, targets);
}
inline void cross_entropy_backward(Context& ctx, Tensor dlogits, Tensor logits, Tensor maxv,
                                   Tensor sumexp, Tensor targets, Tensor dloss,
                                   int64_t vocab_start, int64_t vocab_size) {
  TRAINER_DISPATCH(ctx, cross_entropy_backward, dlogits, logits, maxv, sumexp, targets, dloss,
                   vocab_start, vocab_size);
}
}  // namespace trainer
