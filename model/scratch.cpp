// Sizes of the shared backward temporaries.
#include "model/scratch.h"

namespace trainer::model {

void Scratch::declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch) {
  int64_t N = batch.B * batch.T, C = cfg.d_model, D = cfg.head_dim();
  int64_t H = cfg.n_head, Hkv = cfg.n_kv_head, F = cfg.d_ff;
  dres = buf.add(Category::scratch, "grad.residual", {N, C});
  dln = buf.add(Category::scratch, "grad.norm_out", {N, C});
  dtmp = buf.add(Category::scratch, "grad.partial", {N, C});
  dq = buf.add(Category::scratch, "grad.q", {N, H * D});
  dk = buf.add(Category::scratch, "grad.k", {N, Hkv * D});
  dv = buf.add(Category::scratch, "grad.v", {N, Hkv * D});
  datt = buf.add(Category::scratch, "grad.attention_out", {N, H * D});
  dff1 = buf.add(Category::scratch, "grad.mlp_hidden", {N, F});
  if (cfg.is_llama()) {
    dff2 = buf.add(Category::scratch, "grad.mlp_gate", {N, F});
    dff3 = buf.add(Category::scratch, "grad.mlp_up", {N, F});
  }
}

}  // namespace trainer::model
