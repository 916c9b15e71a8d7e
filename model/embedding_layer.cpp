// Embedding layer over kernels/embedding.h and the TP region ops. Learned
// positions restarting with each packed document come from LayerEnv::positions.
#include "model/embedding_layer.h"

#include "kernels/embedding.h"
#include "kernels/op_scratch.h"
#include "parallel/tp_regions.h"

namespace trainer::model {

void Embedding::declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch) {
  T_ = batch.T;
  cp_ = cp_layout(cfg, batch);
  sp_ = cfg.sequence_parallel;
  vocab_start_ = cfg.vocab_start();
  adds_positions_ = cfg.tp_rank == 0;  // summed over tp: counted once
  int64_t C = cfg.d_model;
  // Backward sorts all the micro-batch's ids at most (a cp chunk's at a time).
  buf.declare_op_scratch(embedding_backward_scratch_bytes(batch.tokens()));
  wte_ = declare_token_table(buf, cfg, false);
  if (!cfg.is_llama())
    wpe_ = buf.add_param({.name = "transformer.wpe.weight",
                          .global_shape = {cfg.max_seq_len, C},
                          .std = cfg.init_std,
                          .weight_decay = false},
                         {cfg.max_seq_len, C});
  out_ = buf.add(Category::activations, "embedding.out", {residual_rows(cfg, batch), C},
                 buf.act_dtype());
}

ParamId Embedding::declare_token_table(Buffers& buf, const ModelConfig& cfg, bool tied_copy) {
  int64_t C = cfg.d_model, V = cfg.padded_vocab();
  return buf.add_param({.name = cfg.is_llama() ? "model.embed_tokens.weight" : "transformer.wte.weight",
                        .global_shape = {V, C},
                        .std = cfg.init_std,
                        .valid_rows = cfg.vocab_size,
                        .tp_dim = 0,
                        .tied_copy = tied_copy},
                       {cfg.local_vocab(), C});
}

template <class Op>
void Embedding::by_positions(Tensor rows, Tensor ids, Op op) const {
  if (cp_.cp == 1) return op(rows, ids, T_, int64_t{0});
  const int64_t c = cp_.chunk();
  cp_.for_each_chunk(ids.numel() / T_, [&](int64_t first, int64_t pos) {
    op(rows.slice(first, first + c), ids.slice(first, first + c), c, pos);
  });
}

void Embedding::forward(const LayerEnv& env, const Scratch& s, Tensor ids) const {
  Tensor wpe = wpe_.index >= 0 && adds_positions_ ? env.buf.weight(wpe_) : Tensor{};
  Tensor full = sp_ ? env.buf.get(s.full_a) : out(env);
  Tensor wte = env.buf.weight(wte_);
  if (!wpe.empty() && !env.positions.empty()) {
    embedding_forward(env.ctx, full, ids, wte, wpe, T_, 0, vocab_start_, env.positions);
  } else {
    by_positions(full, ids, [&](Tensor rows, Tensor chunk_ids, int64_t T, int64_t pos) {
      embedding_forward(env.ctx, rows, chunk_ids, wte, wpe, T, pos, vocab_start_);
    });
  }
  if (sp_)
    parallel::scatter_to_sp_forward(env.tp, full, out(env));
  else
    parallel::reduce_from_tp_forward(env.tp, full);
}

void Embedding::backward(const LayerEnv& env, const Scratch& s, Tensor dout, Tensor ids) const {
  Tensor dwpe = wpe_.index >= 0 ? env.buf.grad(wpe_) : Tensor{};
  Tensor dfull = dout;
  if (sp_) {
    dfull = env.buf.get(s.full_a);
    parallel::scatter_to_sp_backward(env.tp, dout, dfull);
  }
  Tensor dwte = env.buf.grad(wte_);
  if (!dwpe.empty() && !env.positions.empty()) {
    embedding_backward(env.ctx, dwte, dwpe, dfull, ids, T_, 0, vocab_start_, env.positions);
    return;
  }
  by_positions(dfull, ids, [&](Tensor drows, Tensor chunk_ids, int64_t T, int64_t pos) {
    embedding_backward(env.ctx, dwte, dwpe, drows, chunk_ids, T, pos, vocab_start_);
  });
}

}  // namespace trainer::model
