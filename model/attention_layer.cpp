// Attention layer. GPT-2's fused c_attn is kept as three projections so each
// can be split by heads for tensor parallelism and loaded from either family.
#include "model/attention_layer.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "model/rope_positions.h"

namespace trainer::model {

void Attention::declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
                        const BatchShape& batch, int64_t window) {
  rope_ = cfg.is_llama();
  rotary_ = Rope(cfg.rope_theta, cfg.rope_scaling);
  B_ = batch.B;
  T_ = batch.T;
  D_ = cfg.head_dim();
  H_ = cfg.local_heads();
  Hkv_ = cfg.local_kv_heads();
  int64_t C = cfg.d_model, N = batch.tokens();
  int64_t Hg = cfg.n_head, Hkvg = cfg.n_kv_head;
  const bool bias = !cfg.is_llama(), qkv_bias = bias || cfg.qkv_bias;
  float out_std = cfg.init_std / std::sqrt(2.0f * cfg.n_layer);  // GPT-2 residual scaling
  std::string p = prefix + (cfg.is_llama() ? ".self_attn." : ".attn.");
  io_.declare(buf, p + "input", cfg, batch);
  q_proj_.declare(buf, p + "q_proj", C, Hg * D_, qkv_bias, cfg.init_std, Split::column, cfg, N);
  // n_kv_head < tp: tp rank r holds KV head r / kv_replicas, the one its own
  // query heads (h / (Hg / Hkvg), kernels/attention.h) read.
  k_proj_.declare(buf, p + "k_proj", C, Hkvg * D_, qkv_bias, cfg.init_std, Split::column, cfg,
                  N, cfg.kv_replicas());
  v_proj_.declare(buf, p + "v_proj", C, Hkvg * D_, qkv_bias, cfg.init_std, Split::column, cfg,
                  N, cfg.kv_replicas());
  o_proj_.declare(buf, p + (cfg.is_llama() ? "o_proj" : "c_proj"), Hg * D_, C, bias, out_std,
                  Split::row, cfg, N);
  q_in_ = buf.add(Category::activations, p + "q", {N, H_ * D_}, buf.act_dtype());
  k_in_ = buf.add(Category::activations, p + "k", {N, Hkv_ * D_}, buf.act_dtype());
  q_ = q_in_, k_ = k_in_;
  qk_norm_ = cfg.qk_norm;
  if (qk_norm_) {
    // One weight of head_dim for all heads: each tp rank's gradient covers its own heads.
    q_norm_.declare(buf, p + "q_norm", cfg, N * H_, D_, cfg.tp > 1);
    k_norm_.declare(buf, p + "k_norm", cfg, N * Hkv_, D_, cfg.tp > 1);
    q_ = q_norm_.out_id(), k_ = k_norm_.out_id();
  }
  v_ = buf.add(Category::activations, p + "v", {N, Hkv_ * D_}, buf.act_dtype());
  att_ = buf.add(Category::activations, p + "out", {N, H_ * D_}, buf.act_dtype());
  core_ = AttentionCore(cfg, batch, H_, Hkv_, D_, window);
  lse_ = buf.add(Category::activations, p + "lse", core_.lse_shape());
  buf.declare_op_scratch(core_.scratch_bytes(buf.act_dtype(), cfg.fused_attention));
}

Tensor Attention::heads(const LayerEnv& env, BufferId id, int64_t h) const {
  return env.buf.get(id).view({B_, T_, h, D_});
}

namespace {

// A (N, h * D) buffer as N * h rows of one head each (the q/k norms' rows).
Tensor rows_of_heads(Tensor t, int64_t D) { return t.view({t.numel() / D, D}); }

}  // namespace

void Attention::rope(const LayerEnv& env, Tensor x, bool forward) const {
  rope_at_positions(env, core_.cp(), rotary_, x, forward);
}

void Attention::forward(const LayerEnv& env, const Scratch& s, Tensor out, Tensor in) const {
  const Buffers& b = env.buf;
  Tensor x = io_.enter(env, in);
  q_proj_.forward(env, b.get(q_in_), x);
  k_proj_.forward(env, b.get(k_in_), x);
  v_proj_.forward(env, b.get(v_), x);
  if (qk_norm_) {
    q_norm_.forward(env, rows_of_heads(b.get(q_in_), D_));
    k_norm_.forward(env, rows_of_heads(b.get(k_in_), D_));
  }
  Tensor q = heads(env, q_, H_), k = heads(env, k_, Hkv_), v = heads(env, v_, Hkv_);
  if (rope_) {
    rope(env, q, true);
    rope(env, k, true);
  }
  core_.forward(env, s, heads(env, att_, H_), b.get(lse_), q, k, v);
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
  Tensor datt = b.get(s.datt).view({B_, T_, H_, D_});
  core_.backward(env, s, dq, dk, dv, datt, heads(env, q_, H_), heads(env, k_, Hkv_),
                 heads(env, v_, Hkv_), heads(env, att_, H_), b.get(lse_));
  if (rope_) {
    rope(env, dq, false);
    rope(env, dk, false);
  }
  Tensor dq_in = b.get(s.dq), dk_in = b.get(s.dk);
  if (qk_norm_) {
    // Attention's output gradient is spent: it holds the norms' input gradients in turn.
    dq_in = b.get(s.datt);
    q_norm_.backward(env, rows_of_heads(dq_in, D_), rows_of_heads(b.get(s.dq), D_),
                     rows_of_heads(b.get(q_in_), D_));
  }
  Tensor x = io_.saved_input(env, in);
  Tensor dx = io_.dinput(env, s, dinp), tmp = io_.dinput_tmp(env, s);
  q_proj_.backward(env, dx, dq_in, x);
  if (qk_norm_) {
    const int64_t N = B_ * T_;
    dk_in = dq_in.view({dq_in.numel()}).slice(0, N * Hkv_ * D_).view({N, Hkv_ * D_});
    k_norm_.backward(env, rows_of_heads(dk_in, D_), rows_of_heads(b.get(s.dk), D_),
                     rows_of_heads(b.get(k_in_), D_));
  }
  k_proj_.backward(env, tmp, dk_in, x);
  accumulate(env.ctx, dx, tmp);
  v_proj_.backward(env, tmp, b.get(s.dv), x);
  accumulate(env.ctx, dx, tmp);
  io_.enter_backward(env, dx, dinp);
}

}  // namespace trainer::model
