// LM head: final norm, logits over this rank's block of the padded vocabulary
// (the tied token table or its own weight), and vocab-parallel softmax
// cross-entropy: row maxima, sums and target logits are reduced over tp, so
// no rank ever holds full-vocabulary logits. Backward turns the logits buffer
// into their gradient in place.
#pragma once

#include "model/norm_layer.h"
#include "model/scratch.h"
#include "model/tp_io.h"

namespace trainer::model {

class LmHead {
 public:
  void declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch, ParamId tied);
  // losses() (N) written from in (R, C) and targets (N) int32 (< 0 ignored)
  void forward(const LayerEnv& env, Tensor in, Tensor targets) const;
  // dres (R, C) written: d(loss)/d(in) where loss = sum_n dloss * losses[n]
  void backward(const LayerEnv& env, const Scratch& s, Tensor dres, Tensor in, Tensor targets,
                float dloss) const;
  Tensor losses(const LayerEnv& env) const { return env.buf.get(losses_); }
  // (N, local padded vocabulary) of the last forward, in the activation dtype.
  Tensor logits(const LayerEnv& env) const { return env.buf.get(logits_); }

 private:
  int64_t vocab_size_ = 0, vocab_start_ = 0;
  Norm norm_;
  TpIo io_;
  ParamId weight_;
  BufferId logits_ = -1, maxv_ = -1, sumexp_ = -1, target_logit_ = -1, losses_ = -1, dloss_ = -1;
};

}  // namespace trainer::model
