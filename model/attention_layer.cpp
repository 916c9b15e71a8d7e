// Attention layer. GPT-2's fused c_attn is kept as three projections so each
// can be split by heads for tensor parallelism and loaded from either family.
#include "model/attention_layer.h"

#include <cmath>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/rope.h"

namespace trainer::model {

void Attention::declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
                        const BatchShape& batch) {
  rope_ = cfg.is_llama();
  theta_ = cfg.rope_theta;
  B_ = batch.B;
  T_ = batch.T;
  D_ = cfg.head_dim();
  H_ = cfg.local_heads();
  Hkv_ = cfg.local_kv_heads();
  int64_t C = cfg.d_model, N = batch.tokens();
  int64_t Hg = cfg.n_head, Hkvg = cfg.n_kv_head;
  bool bias = !cfg.is_llama();
  float out_std = cfg.init_std / std::sqrt(2.0f * cfg.n_layer);  // GPT-2 residual scaling
  std::string p = prefix + (cfg.is_llama() ? ".self_attn." : ".attn.");
  io_.declare(buf, p + "input", cfg, batch);
  q_proj_.declare(buf, p + "q_proj", C, Hg * D_, bias, cfg.init_std, Split::column, cfg);
  // n_kv_head < tp: tp rank r holds KV head r / kv_replicas, the one its own
  // query heads (h / (Hg / Hkvg), kernels/attention.h) read.
  k_proj_.declare(buf, p + "k_proj", C, Hkvg * D_, bias, cfg.init_std, Split::column, cfg,
                  cfg.kv_replicas());
  v_proj_.declare(buf, p + "v_proj", C, Hkvg * D_, bias, cfg.init_std, Split::column, cfg,
                  cfg.kv_replicas());
  o_proj_.declare(buf, p + (cfg.is_llama() ? "o_proj" : "c_proj"), Hg * D_, C, bias, out_std,
                  Split::row, cfg);
  q_ = buf.add(Category::activations, p + "q", {N, H_ * D_}, buf.act_dtype());
  k_ = buf.add(Category::activations, p + "k", {N, Hkv_ * D_}, buf.act_dtype());
  v_ = buf.add(Category::activations, p + "v", {N, Hkv_ * D_}, buf.act_dtype());
  att_ = buf.add(Category::activations, p + "out", {N, H_ * D_}, buf.act_dtype());
  lse_ = buf.add(Category::activations, p + "lse", {B_, H_, T_});
}

Tensor Attention::heads(const LayerEnv& env, BufferId id, int64_t h) const {
  return env.buf.get(id).view({B_, T_, h, D_});
}

void Attention::forward(const LayerEnv& env, const Scratch& s, Tensor out, Tensor in) const {
  const Buffers& b = env.buf;
  Tensor x = io_.enter(env, in);
  q_proj_.forward(env, b.get(q_), x);
  k_proj_.forward(env, b.get(k_), x);
  v_proj_.forward(env, b.get(v_), x);
  Tensor q = heads(env, q_, H_), k = heads(env, k_, Hkv_), v = heads(env, v_, Hkv_);
  if (rope_) {
    rope_forward(env.ctx, q, q, theta_, 0);
    rope_forward(env.ctx, k, k, theta_, 0);
  }
  attention_forward(env.ctx, heads(env, att_, H_), b.get(lse_), q, k, v);
  Tensor partial = io_.partial_out(env, s, out);
  o_proj_.forward(env, partial, b.get(att_));
  io_.leave(env, partial, out);
}

void Attention::backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout,
                         Tensor in) const {
  const Buffers& b = env.buf;
  Tensor g = io_.leave_backward(env, s, dout);
  o_proj_.backward(env, b.get(s.datt), g, b.get(att_));
  Tensor dq = b.get(s.dq).view({B_, T_, H_, D_});
  Tensor dk = b.get(s.dk).view({B_, T_, Hkv_, D_});
  Tensor dv = b.get(s.dv).view({B_, T_, Hkv_, D_});
  attention_backward(env.ctx, dq, dk, dv, b.get(s.datt).view({B_, T_, H_, D_}),
                     heads(env, q_, H_), heads(env, k_, Hkv_), heads(env, v_, Hkv_),
                     heads(env, att_, H_), b.get(lse_));
  if (rope_) {
    rope_backward(env.ctx, dq, dq, theta_, 0);
    rope_backward(env.ctx, dk, dk, theta_, 0);
  }
  Tensor x = io_.saved_input(env, in);
  Tensor dx = io_.dinput(env, s, dinp), tmp = io_.dinput_tmp(env, s);
  q_proj_.backward(env, dx, b.get(s.dq), x);
  k_proj_.backward(env, tmp, b.get(s.dk), x);
  accumulate(env.ctx, dx, tmp);
  v_proj_.backward(env, tmp, b.get(s.dv), x);
  accumulate(env.ctx, dx, tmp);
  io_.enter_backward(env, dx, dinp);
}

}  // namespace trainer::model
