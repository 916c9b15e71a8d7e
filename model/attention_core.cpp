// See attention_core.h.
#include "model/attention_core.h"

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/op_scratch.h"
#include "parallel/cp_kv_exchange.h"

namespace trainer::model {

namespace {

// Local chunk j (B, c, h, D) of a (B, 2c, h, D) tensor: a strided view.
Tensor chunk_of(Tensor t, int j, int64_t c) {
  Tensor v = t;
  v.shape[1] = c;
  v.data = static_cast<char*>(t.data) + j * c * t.stride[1] * int64_t(dtype_size(t.dtype));
  return v;
}

// Chunk j's log-sum-exps (B, H, c) in the (2, B, H, c) lse buffer (contiguous).
Tensor lse_of(Tensor lse, int j) {
  return lse.slice(j, j + 1).view({lse.size(1), lse.size(2), lse.size(3)});
}

// Chunk j's (B, c) document starts in the (B, 2c) per-token ones; empty stays empty.
Tensor doc_chunk(Tensor docs, int j, int64_t c) {
  if (docs.empty()) return docs;
  Tensor v = docs;
  v.shape[1] = c;
  v.data = static_cast<int32_t*>(docs.data) + j * c;
  return v;
}

}  // namespace

AttentionCore::AttentionCore(const ModelConfig& cfg, const BatchShape& batch, int64_t heads,
                             int64_t kv_heads, int64_t head_dim, int64_t window)
    : cp_(cp_layout(cfg, batch)), B_(batch.B), T_(batch.T), H_(heads), Hkv_(kv_heads),
      D_(head_dim), window_(window) {}

std::vector<int64_t> AttentionCore::lse_shape() const {
  if (cp_.cp == 1) return {B_, H_, T_};
  return {parallel::CpLayout::kLocalChunks, B_, H_, cp_.chunk()};
}

size_t AttentionCore::scratch_bytes(DType dtype, bool fused) const {
  // Under cp each local query chunk attends to the whole gathered sequence.
  return attention_scratch_bytes({B_, cp_.cp == 1 ? T_ : cp_.chunk(), cp_.cp == 1 ? T_ : cp_.seq,
                                  H_, Hkv_, D_, dtype},
                                 fused);
}

Tensor AttentionCore::docs(const LayerEnv& env) const {
  return env.doc_start.empty() ? Tensor{} : env.doc_start.view({B_, T_});
}

Tensor AttentionCore::whole(const LayerEnv& env, BufferId id) const {
  return env.buf.get(id).view({B_, cp_.seq, Hkv_, D_});
}

void AttentionCore::gather_kv(const LayerEnv& env, const Scratch& s, Tensor k, Tensor v, Tensor kg,
                              Tensor vg) const {
  const Buffers& b = env.buf;
  TRAINER_CHECK(env.cp != nullptr, "attention: context parallel over {} ranks but no cp group was "
                "set (Model::set_cp_group)", cp_.cp);
  // The second gradient pair is free outside backward's attention: staging space.
  parallel::cp_gather_kv(env.ctx, *env.cp, cp_, k, b.get(s.cp_dk2), kg);
  parallel::cp_gather_kv(env.ctx, *env.cp, cp_, v, b.get(s.cp_dv2), vg);
}

void AttentionCore::forward(const LayerEnv& env, const Scratch& s, Tensor att, Tensor lse, Tensor q,
                            Tensor k, Tensor v) const {
  const Tensor doc_start = docs(env);
  if (cp_.cp == 1) return attention_forward(env.ctx, att, lse, q, k, v, 0, doc_start, window_);
  Tensor kg = whole(env, s.cp_k), vg = whole(env, s.cp_v);
  gather_kv(env, s, k, v, kg, vg);
  const int64_t c = cp_.chunk();
  for (int j = 0; j < parallel::CpLayout::kLocalChunks; ++j)
    attention_forward(env.ctx, chunk_of(att, j, c), lse_of(lse, j), chunk_of(q, j, c), kg, vg,
                      cp_.offset(j), doc_chunk(doc_start, j, c), window_);
}

void AttentionCore::backward(const LayerEnv& env, const Scratch& s, Tensor dq, Tensor dk, Tensor dv,
                             Tensor datt, Tensor q, Tensor k, Tensor v, Tensor att,
                             Tensor lse) const {
  const Tensor doc_start = docs(env);
  if (cp_.cp == 1)
    return attention_backward(env.ctx, dq, dk, dv, datt, q, k, v, att, lse, 0, doc_start, window_);
  const Buffers& b = env.buf;
  const int64_t c = cp_.chunk();
  Tensor kg = whole(env, s.cp_k), vg = whole(env, s.cp_v);
  gather_kv(env, s, k, v, kg, vg);
  // Each query chunk's dK, dV cover the whole sequence (0 past its position).
  const BufferId dks[] = {s.cp_dk, s.cp_dk2}, dvs[] = {s.cp_dv, s.cp_dv2};
  for (int j = 0; j < parallel::CpLayout::kLocalChunks; ++j)
    attention_backward(env.ctx, chunk_of(dq, j, c), whole(env, dks[j]), whole(env, dvs[j]),
                       chunk_of(datt, j, c), chunk_of(q, j, c), kg, vg, chunk_of(att, j, c),
                       lse_of(lse, j), cp_.offset(j), doc_chunk(doc_start, j, c), window_);
  accumulate(env.ctx, b.get(s.cp_dk), b.get(s.cp_dk2));
  accumulate(env.ctx, b.get(s.cp_dv), b.get(s.cp_dv2));
  parallel::cp_reduce_scatter_kv(env.ctx, *env.cp, cp_, whole(env, s.cp_dk), b.get(s.cp_dk2), dk);
  parallel::cp_reduce_scatter_kv(env.ctx, *env.cp, cp_, whole(env, s.cp_dv), b.get(s.cp_dv2), dv);
}

}  // namespace trainer::model
