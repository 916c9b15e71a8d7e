// Sizes of the shared backward temporaries.
#include "model/scratch.h"

namespace trainer::model {

void Scratch::declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch) {
  int64_t N = batch.tokens(), R = residual_rows(cfg, batch), C = cfg.d_model, D = cfg.head_dim();
  int64_t H = cfg.local_heads(), Hkv = cfg.local_kv_heads(), F = cfg.local_ff();
  dres = buf.add(Category::scratch, "grad.residual", {R, C});
  dln = buf.add(Category::scratch, "grad.norm_out", {R, C});
  dtmp = buf.add(Category::scratch, "grad.partial", {R, C});
  dq = buf.add(Category::scratch, "grad.q", {N, H * D});
  dk = buf.add(Category::scratch, "grad.k", {N, Hkv * D});
  dv = buf.add(Category::scratch, "grad.v", {N, Hkv * D});
  datt = buf.add(Category::scratch, "grad.attention_out", {N, H * D});
  dff1 = buf.add(Category::scratch, "grad.mlp_hidden", {N, F});
  if (cfg.is_llama()) {
    dff2 = buf.add(Category::scratch, "grad.mlp_gate", {N, F});
    dff3 = buf.add(Category::scratch, "grad.mlp_up", {N, F});
  }
  if (cfg.sequence_parallel) {
    full_a = buf.add(Category::scratch, "sp.full_a", {N, C});
    full_b = buf.add(Category::scratch, "sp.full_b", {N, C});
    full_c = buf.add(Category::scratch, "sp.full_c", {N, C});
  }
}

}  // namespace trainer::model
