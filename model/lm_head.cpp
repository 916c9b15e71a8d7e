// LM head and loss over kernels/linear.h and kernels/cross_entropy.h.
#include "model/lm_head.h"

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"

namespace trainer::model {

void LmHead::declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch,
                     ParamId tied) {
  int64_t N = batch.B * batch.T, C = cfg.d_model, V = cfg.padded_vocab();
  vocab_size_ = cfg.vocab_size;
  norm_.declare(buf, cfg.is_llama() ? "model.norm" : "transformer.ln_f", cfg, N);
  if (cfg.tie_embeddings)
    weight_ = tied;
  else
    weight_ = buf.add_param({.name = "lm_head.weight",
                             .global_shape = {V, C},
                             .std = cfg.init_std,
                             .valid_rows = cfg.vocab_size,
                             .tp_dim = 0},
                            {V, C});
  logits_ = buf.add(Category::activations, "lm_head.logits", {N, V});
  maxv_ = buf.add(Category::activations, "lm_head.max", {N});
  sumexp_ = buf.add(Category::activations, "lm_head.sumexp", {N});
  target_logit_ = buf.add(Category::activations, "lm_head.target_logit", {N});
  losses_ = buf.add(Category::activations, "lm_head.losses", {N});
  dloss_ = buf.add(Category::scratch, "grad.losses", {N});
}

void LmHead::forward(const LayerEnv& env, Tensor in, Tensor targets) const {
  const Buffers& b = env.buf;
  norm_.forward(env, in);
  Tensor logits = b.get(logits_);
  linear_forward(env.ctx, logits, norm_.out(env), b.param(weight_), Tensor{});
  cross_entropy_max(env.ctx, b.get(maxv_), logits, 0, vocab_size_);
  cross_entropy_sumexp(env.ctx, b.get(sumexp_), b.get(target_logit_), logits, b.get(maxv_),
                       targets, 0, vocab_size_);
  cross_entropy_loss(env.ctx, b.get(losses_), b.get(maxv_), b.get(sumexp_), b.get(target_logit_),
                     targets);
}

void LmHead::backward(const LayerEnv& env, const Scratch& s, Tensor dres, Tensor in,
                      Tensor targets, float dloss) const {
  const Buffers& b = env.buf;
  Tensor logits = b.get(logits_), dl = b.get(dloss_), dln = b.get(s.dln);
  fill(env.ctx, dl, dloss);
  cross_entropy_backward(env.ctx, logits, logits, b.get(maxv_), b.get(sumexp_), targets, dl, 0,
                         vocab_size_);
  linear_backward(env.ctx, dln, b.grad(weight_), Tensor{}, logits, norm_.out(env),
                  b.param(weight_));
  norm_.backward(env, dres, dln, in);
}

}  // namespace trainer::model
