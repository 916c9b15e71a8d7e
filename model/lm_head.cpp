// LM head and loss over kernels/linear.h, kernels/cross_entropy.h and the TP
// region ops (the head's input enters a TP region like any column-parallel layer).
#include "model/lm_head.h"

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"

namespace trainer::model {

void LmHead::declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch,
                     ParamId tied) {
  int64_t N = batch.tokens(), C = cfg.d_model, V = cfg.padded_vocab();
  vocab_size_ = cfg.vocab_size;
  vocab_start_ = cfg.vocab_start();
  norm_.declare(buf, cfg.is_llama() ? "model.norm" : "transformer.ln_f", cfg,
                residual_rows(cfg, batch));
  io_.declare(buf, "lm_head.input", cfg, batch);
  if (cfg.tie_embeddings)
    weight_ = tied;
  else
    weight_ = buf.add_param({.name = "lm_head.weight",
                             .global_shape = {V, C},
                             .std = cfg.init_std,
                             .valid_rows = cfg.vocab_size,
                             .tp_dim = 0},
                            {cfg.local_vocab(), C});
  logits_ = buf.add(Category::activations, "lm_head.logits", {N, cfg.local_vocab()}, buf.act_dtype());
  maxv_ = buf.add(Category::activations, "lm_head.max", {N});
  sumexp_ = buf.add(Category::activations, "lm_head.sumexp", {N});
  target_logit_ = buf.add(Category::activations, "lm_head.target_logit", {N});
  losses_ = buf.add(Category::activations, "lm_head.losses", {N});
  dloss_ = buf.add(Category::scratch, "grad.losses", {N});
}

void LmHead::forward(const LayerEnv& env, Tensor in, Tensor targets) const {
  const Buffers& b = env.buf;
  norm_.forward(env, in);
  Tensor x = io_.enter(env, norm_.out(env));
  Tensor logits = b.get(logits_), maxv = b.get(maxv_), sumexp = b.get(sumexp_),
         tlogit = b.get(target_logit_);
  linear_forward(env.ctx, logits, x, b.weight(weight_), Tensor{});
  cross_entropy_max(env.ctx, maxv, logits, vocab_start_, vocab_size_);
  if (env.tp.size() > 1) env.tp.all_reduce(maxv, parallel::ReduceOp::max);
  cross_entropy_sumexp(env.ctx, sumexp, tlogit, logits, maxv, targets, vocab_start_, vocab_size_);
  if (env.tp.size() > 1) {
    env.tp.all_reduce(sumexp, parallel::ReduceOp::sum);
    env.tp.all_reduce(tlogit, parallel::ReduceOp::sum);
  }
  cross_entropy_loss(env.ctx, b.get(losses_), maxv, sumexp, tlogit, targets);
}

void LmHead::backward(const LayerEnv& env, const Scratch& s, Tensor dres, Tensor in,
                      Tensor targets, float dloss) const {
  const Buffers& b = env.buf;
  Tensor logits = b.get(logits_), dl = b.get(dloss_), dln = b.get(s.dln);
  fill(env.ctx, dl, dloss);
  cross_entropy_backward(env.ctx, logits, logits, b.get(maxv_), b.get(sumexp_), targets, dl,
                         vocab_start_, vocab_size_);
  Tensor dx = io_.dinput(env, s, dln);
  linear_backward(env.ctx, dx, b.grad(weight_), Tensor{}, logits, io_.saved_input(env, norm_.out(env)),
                  b.weight(weight_));
  io_.enter_backward(env, dx, dln);
  norm_.backward(env, dres, dln, in);
}

}  // namespace trainer::model
