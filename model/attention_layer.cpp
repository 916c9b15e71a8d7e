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
  H_ = cfg.n_head;
  Hkv_ = cfg.n_kv_head;
  int64_t C = cfg.d_model, N = B_ * T_;
  bool bias = !cfg.is_llama();
  float out_std = cfg.init_std / std::sqrt(2.0f * cfg.n_layer);  // GPT-2 residual scaling
  std::string p = prefix + (cfg.is_llama() ? ".self_attn." : ".attn.");
  q_proj_.declare(buf, p + "q_proj", C, H_ * D_, bias, cfg.init_std);
  k_proj_.declare(buf, p + "k_proj", C, Hkv_ * D_, bias, cfg.init_std);
  v_proj_.declare(buf, p + "v_proj", C, Hkv_ * D_, bias, cfg.init_std);
  o_proj_.declare(buf, p + (cfg.is_llama() ? "o_proj" : "c_proj"), H_ * D_, C, bias, out_std);
  q_ = buf.add(Category::activations, p + "q", {N, H_ * D_});
  k_ = buf.add(Category::activations, p + "k", {N, Hkv_ * D_});
  v_ = buf.add(Category::activations, p + "v", {N, Hkv_ * D_});
  att_ = buf.add(Category::activations, p + "out", {N, H_ * D_});
  lse_ = buf.add(Category::activations, p + "lse", {B_, H_, T_});
}

Tensor Attention::heads(const LayerEnv& env, BufferId id, int64_t h) const {
  return env.buf.get(id).view({B_, T_, h, D_});
}

void Attention::forward(const LayerEnv& env, Tensor out, Tensor in) const {
  const Buffers& b = env.buf;
  q_proj_.forward(env, b.get(q_), in);
  k_proj_.forward(env, b.get(k_), in);
  v_proj_.forward(env, b.get(v_), in);
  Tensor q = heads(env, q_, H_), k = heads(env, k_, Hkv_), v = heads(env, v_, Hkv_);
  if (rope_) {
    rope_forward(env.ctx, q, q, theta_, 0);
    rope_forward(env.ctx, k, k, theta_, 0);
  }
  Tensor att = heads(env, att_, H_);
  attention_forward(env.ctx, att, b.get(lse_), q, k, v);
  o_proj_.forward(env, out, b.get(att_));
}

void Attention::backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout,
                         Tensor in) const {
  const Buffers& b = env.buf;
  o_proj_.backward(env, b.get(s.datt), dout, b.get(att_));
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
  Tensor tmp = b.get(s.dtmp);
  q_proj_.backward(env, dinp, b.get(s.dq), in);
  k_proj_.backward(env, tmp, b.get(s.dk), in);
  accumulate(env.ctx, dinp, tmp);
  v_proj_.backward(env, tmp, b.get(s.dv), in);
  accumulate(env.ctx, dinp, tmp);
}

}  // namespace trainer::model
