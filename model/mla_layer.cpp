// Multi-head latent attention layer. Hugging Face's DeepSeek-V3 names: q_a_proj,
// q_a_layernorm, q_b_proj (or q_proj), kv_a_proj_with_mqa, kv_a_layernorm,
// kv_b_proj, o_proj; each q_b/q_proj head row block is [nope | rope], each
// kv_b head [k_nope | v], kv_a's rows [c_kv | k_rope], as theirs.
#include "model/mla_layer.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/head_columns.h"
#include "model/rope_positions.h"

namespace trainer::model {

void Mla::declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
                  const BatchShape& batch, int64_t window) {
  const MlaConfig& m = cfg.mla;
  TRAINER_CHECK(m.enabled && cfg.is_llama() && cfg.n_kv_head == cfg.n_head &&
                    cfg.head_dim() == m.qk_dim() && m.v_dim <= m.qk_dim() && m.qk_rope % 2 == 0,
                "{}: multi-head latent attention needs llama, one KV head per head and "
                "v_head_dim <= the q/k head", prefix);
  rotary_ = Rope(cfg.rope_theta, cfg.rope_scaling);
  q_scale_ = static_cast<float>(mla_softmax_multiplier(cfg.rope_scaling));
  B_ = batch.B, T_ = batch.T, H_ = cfg.local_heads();
  D_ = m.qk_dim(), nope_ = m.qk_nope, rope_ = m.qk_rope, v_ = m.v_dim;
  core_ = AttentionCore(cfg, batch, H_, H_, D_, window);
  q_lora_ = m.q_lora_rank, kv_lora_ = m.kv_lora_rank;
  const int64_t C = cfg.d_model, N = batch.tokens(), Hg = cfg.n_head;
  const float out_std = cfg.init_std / std::sqrt(2.0f * cfg.n_layer);  // as attention_layer's
  const std::string p = prefix + ".self_attn.";
  io_.declare(buf, p + "input", cfg, batch);
  const bool tp_partial = cfg.tp > 1;
  if (q_lora_ > 0) {
    q_a_.declare(buf, p + "q_a_proj", C, q_lora_, false, cfg.init_std, Split::none, cfg, N, 1,
                 Gelu::none, tp_partial);
    q_a_out_ = buf.add(Category::activations, p + "q_a", {N, q_lora_}, buf.act_dtype());
    q_a_norm_.declare(buf, p + "q_a_layernorm", cfg, N, q_lora_, tp_partial);
    q_b_.declare(buf, p + "q_b_proj", q_lora_, Hg * D_, false, cfg.init_std, Split::column, cfg, N);
  } else {
    q_proj_.declare(buf, p + "q_proj", C, Hg * D_, false, cfg.init_std, Split::column, cfg, N);
  }
  kv_a_.declare(buf, p + "kv_a_proj_with_mqa", C, kv_lora_ + rope_, false, cfg.init_std,
                Split::none, cfg, N, 1, Gelu::none, tp_partial);
  c_kv_ = buf.add(Category::activations, p + "kv_latent", {N, kv_lora_}, buf.act_dtype());
  kv_a_norm_.declare(buf, p + "kv_a_layernorm", cfg, N, kv_lora_, tp_partial);
  kv_b_.declare(buf, p + "kv_b_proj", kv_lora_, Hg * (nope_ + v_), false, cfg.init_std,
                Split::column, cfg, N);
  o_proj_.declare(buf, p + "o_proj", Hg * v_, C, false, out_std, Split::row, cfg, N);
  q_ = buf.add(Category::activations, p + "q", {N, H_ * D_}, buf.act_dtype());
  k_ = buf.add(Category::activations, p + "k", {N, H_ * D_}, buf.act_dtype());
  v_pad_ = buf.add(Category::activations, p + "v", {N, H_ * D_}, buf.act_dtype());
  att_ = buf.add(Category::activations, p + "out", {N, H_ * D_}, buf.act_dtype());
  att_v_ = buf.add(Category::activations, p + "out_v", {N, H_ * v_}, buf.act_dtype());
  lse_ = buf.add(Category::activations, p + "lse", core_.lse_shape());
  buf.declare_op_scratch(core_.scratch_bytes(buf.act_dtype(), cfg.fused_attention));
}

Tensor Mla::rows(Tensor t, int64_t h, int64_t w) const {
  const int64_t N = B_ * T_;
  return t.view({t.numel()}).slice(0, N * h * w).view({N, h, w});
}

Tensor Mla::seq(Tensor t, int64_t h, int64_t w) const {
  return rows(t, h, w).view({B_, T_, h, w});
}

void Mla::rope_query(const LayerEnv& env, const Scratch& s, Tensor q, bool forward) const {
  Tensor parts = env.buf.get(s.mla_rope);
  copy_head_columns(env.ctx, rows(parts, H_, rope_), 0, rows(q, H_, D_), nope_, rope_);
  rope_at_positions(env, core_.cp(), rotary_, seq(parts, H_, rope_), forward);
  copy_head_columns(env.ctx, rows(q, H_, D_), nope_, rows(parts, H_, rope_), 0, rope_);
}

void Mla::forward(const LayerEnv& env, const Scratch& s, Tensor out, Tensor in) const {
  const Buffers& b = env.buf;
  Context& ctx = env.ctx;
  Tensor x = io_.enter(env, in);
  Tensor q = b.get(q_);
  if (q_lora_ > 0) {
    q_a_.forward(env, b.get(q_a_out_), x);
    q_a_norm_.forward(env, b.get(q_a_out_));
    q_b_.forward(env, q, q_a_norm_.out(env));
  } else {
    q_proj_.forward(env, q, x);
  }
  rope_query(env, s, q, true);
  if (q_scale_ != 1.0f) scale(ctx, q, q_scale_);  // backward's attention reads these q too
  // The latent and the shared RoPE key part.
  Tensor latent = b.get(s.mla_latent), k_rope = rows(b.get(s.mla_rope), 1, rope_);
  kv_a_.forward(env, latent, x);
  Tensor latent3 = rows(latent, 1, kv_lora_ + rope_);
  copy_head_columns(ctx, rows(b.get(c_kv_), 1, kv_lora_), 0, latent3, 0, kv_lora_);
  copy_head_columns(ctx, k_rope, 0, latent3, kv_lora_, rope_);
  rope_at_positions(env, core_.cp(), rotary_, seq(k_rope, 1, rope_), true);
  kv_a_norm_.forward(env, b.get(c_kv_));
  // Per-head keys and (padded) values.
  Tensor kv = rows(b.get(s.mla_kv), H_, nope_ + v_);
  kv_b_.forward(env, b.get(s.mla_kv), kv_a_norm_.out(env));
  Tensor k = rows(b.get(k_), H_, D_), v = rows(b.get(v_pad_), H_, D_);
  copy_head_columns(ctx, k, 0, kv, 0, nope_);
  copy_head_columns(ctx, k, nope_, k_rope, 0, rope_);
  fill(ctx, b.get(v_pad_), 0.0f);
  copy_head_columns(ctx, v, 0, kv, nope_, v_);
  core_.forward(env, s, seq(b.get(att_), H_, D_), b.get(lse_), seq(q, H_, D_),
                seq(b.get(k_), H_, D_), seq(b.get(v_pad_), H_, D_));
  copy_head_columns(ctx, rows(b.get(att_v_), H_, v_), 0, rows(b.get(att_), H_, D_), 0, v_);
  Tensor partial = io_.partial_out(env, s, out);
  o_proj_.forward(env, partial, b.get(att_v_));
  io_.leave(env, partial, out);
}

void Mla::backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout,
                   Tensor in) const {
  const Buffers& b = env.buf;
  Context& ctx = env.ctx;
  const int64_t N = B_ * T_;
  Tensor g = io_.leave_backward(env, s, dout);
  // dq's buffer holds the value columns' gradient until attention's backward writes dq.
  Tensor datt_v = rows(b.get(s.dq), 1, H_ * v_).view({N, H_ * v_});
  o_proj_.backward(env, datt_v, g, b.get(att_v_));
  Tensor datt = b.get(s.datt);
  fill(ctx, datt, 0.0f);
  copy_head_columns(ctx, rows(datt, H_, D_), 0, rows(datt_v, H_, v_), 0, v_);
  Tensor dq = b.get(s.dq), dk = b.get(s.dk), dv = b.get(s.dv);
  core_.backward(env, s, seq(dq, H_, D_), seq(dk, H_, D_), seq(dv, H_, D_), seq(datt, H_, D_),
                 seq(b.get(q_), H_, D_), seq(b.get(k_), H_, D_), seq(b.get(v_pad_), H_, D_),
                 seq(b.get(att_), H_, D_), b.get(lse_));
  // kv_b's output gradient: each head's k_nope and v columns.
  Tensor dkv = b.get(s.mla_kv);
  copy_head_columns(ctx, rows(dkv, H_, nope_ + v_), 0, rows(dk, H_, D_), 0, nope_);
  copy_head_columns(ctx, rows(dkv, H_, nope_ + v_), nope_, rows(dv, H_, D_), 0, v_);
  // The shared RoPE key part's gradient: the sum of every head's, turned back.
  Tensor dk_rope = rows(b.get(s.mla_rope), 1, rope_);
  copy_head_columns(ctx, dk_rope, 0, rows(dk, H_, D_), nope_, rope_);
  rope_at_positions(env, core_.cp(), rotary_, seq(dk_rope, 1, rope_), false);
  Tensor dlatent = b.get(s.mla_latent);
  copy_head_columns(ctx, rows(dlatent, 1, kv_lora_ + rope_), kv_lora_, dk_rope, 0, rope_);
  Tensor dnormed = rows(b.get(s.mla_grad_a), 1, kv_lora_).view({N, kv_lora_});
  Tensor dc_kv = rows(b.get(s.mla_grad_b), 1, kv_lora_).view({N, kv_lora_});
  kv_b_.backward(env, dnormed, dkv, kv_a_norm_.out(env));
  kv_a_norm_.backward(env, dc_kv, dnormed, b.get(c_kv_));
  copy_head_columns(ctx, rows(dlatent, 1, kv_lora_ + rope_), 0, rows(dc_kv, 1, kv_lora_), 0,
                    kv_lora_);
  Tensor x = io_.saved_input(env, in);
  Tensor dx = io_.dinput(env, s, dinp), tmp = io_.dinput_tmp(env, s);
  kv_a_.backward(env, dx, dlatent, x);
  // The queries: the softmax multiplier's and RoPE's backward, then the projections.
  if (q_scale_ != 1.0f) scale(ctx, rows(dq, H_, D_), q_scale_);
  rope_query(env, s, dq, false);
  if (q_lora_ > 0) {
    Tensor dq_normed = rows(b.get(s.mla_grad_a), 1, q_lora_).view({N, q_lora_});
    Tensor dq_a = rows(b.get(s.mla_grad_b), 1, q_lora_).view({N, q_lora_});
    q_b_.backward(env, dq_normed, dq, q_a_norm_.out(env));
    q_a_norm_.backward(env, dq_a, dq_normed, b.get(q_a_out_));
    q_a_.backward(env, tmp, dq_a, x);
  } else {
    q_proj_.backward(env, tmp, dq, x);
  }
  accumulate(ctx, dx, tmp);
  io_.enter_backward(env, dx, dinp);
}

}  // namespace trainer::model
