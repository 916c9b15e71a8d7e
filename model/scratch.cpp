// Sizes of the shared backward temporaries.
#include "model/scratch.h"

#include <algorithm>

namespace trainer::model {

void Scratch::declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch) {
  int64_t N = batch.tokens(), R = residual_rows(cfg, batch), C = cfg.d_model, D = cfg.head_dim();
  int64_t H = cfg.local_heads(), Hkv = cfg.local_kv_heads(), F = cfg.local_ff();
  dres = buf.add(Category::scratch, "grad.residual", {R, C}, buf.act_dtype());
  dln = buf.add(Category::scratch, "grad.norm_out", {R, C}, buf.act_dtype());
  dtmp = buf.add(Category::scratch, "grad.partial", {R, C}, buf.act_dtype());
  dq = buf.add(Category::scratch, "grad.q", {N, H * D}, buf.act_dtype());
  dk = buf.add(Category::scratch, "grad.k", {N, Hkv * D}, buf.act_dtype());
  dv = buf.add(Category::scratch, "grad.v", {N, Hkv * D}, buf.act_dtype());
  datt = buf.add(Category::scratch, "grad.attention_out", {N, H * D}, buf.act_dtype());
  dff1 = buf.add(Category::scratch, "grad.mlp_hidden", {N, F}, buf.act_dtype());
  if (cfg.is_llama()) {
    dff2 = buf.add(Category::scratch, "grad.mlp_gate", {N, F}, buf.act_dtype());
    dff3 = buf.add(Category::scratch, "grad.mlp_up", {N, F}, buf.act_dtype());
  }
  if (cfg.sequence_parallel) {
    full_a = buf.add(Category::scratch, "sp.full_a", {N, C}, buf.act_dtype());
    full_b = buf.add(Category::scratch, "sp.full_b", {N, C}, buf.act_dtype());
    full_c = buf.add(Category::scratch, "sp.full_c", {N, C}, buf.act_dtype());
  }
  if (const MlaConfig& m = cfg.mla; m.enabled) {
    const int64_t lat = std::max(m.q_lora_rank, m.kv_lora_rank);
    mla_kv = buf.add(Category::scratch, "mla.kv", {N, H * (m.qk_nope + m.v_dim)}, buf.act_dtype());
    mla_latent = buf.add(Category::scratch, "mla.kv_latent", {N, m.kv_lora_rank + m.qk_rope},
                         buf.act_dtype());
    mla_grad_a = buf.add(Category::scratch, "mla.grad_latent_a", {N, lat}, buf.act_dtype());
    mla_grad_b = buf.add(Category::scratch, "mla.grad_latent_b", {N, lat}, buf.act_dtype());
    mla_rope = buf.add(Category::scratch, "mla.rope_parts", {N, H * m.qk_rope}, buf.act_dtype());
  }
  if (cfg.cp > 1) {
    const int64_t kv = N * cfg.cp * Hkv * D;
    for (auto [id, name] : {std::pair{&cp_k, "cp.k"}, {&cp_v, "cp.v"}, {&cp_dk, "cp.grad_k"},
                            {&cp_dv, "cp.grad_v"}, {&cp_dk2, "cp.grad_k2"}, {&cp_dv2, "cp.grad_v2"}})
      *id = buf.add(Category::scratch, name, {kv}, buf.act_dtype());
  }
}

}  // namespace trainer::model
