// Embedding layer over kernels/embedding.h.
#include "model/embedding_layer.h"

#include "kernels/embedding.h"

namespace trainer::model {

void Embedding::declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch) {
  T_ = batch.T;
  int64_t C = cfg.d_model, V = cfg.padded_vocab();
  wte_ = buf.add_param({.name = cfg.is_llama() ? "model.embed_tokens.weight" : "transformer.wte.weight",
                        .global_shape = {V, C},
                        .std = cfg.init_std,
                        .valid_rows = cfg.vocab_size,
                        .tp_dim = 0},
                       {V, C});
  if (!cfg.is_llama())
    wpe_ = buf.add_param({.name = "transformer.wpe.weight",
                          .global_shape = {cfg.max_seq_len, C},
                          .std = cfg.init_std,
                          .weight_decay = false},
                         {cfg.max_seq_len, C});
  out_ = buf.add(Category::activations, "embedding.out", {batch.B * batch.T, C});
}

void Embedding::forward(const LayerEnv& env, Tensor ids) const {
  Tensor wpe = wpe_.index >= 0 ? env.buf.param(wpe_) : Tensor{};
  embedding_forward(env.ctx, out(env), ids, env.buf.param(wte_), wpe, T_, 0, 0);
}

void Embedding::backward(const LayerEnv& env, Tensor dout, Tensor ids) const {
  Tensor dwpe = wpe_.index >= 0 ? env.buf.grad(wpe_) : Tensor{};
  embedding_backward(env.ctx, env.buf.grad(wte_), dwpe, dout, ids, T_, 0, 0);
}

}  // namespace trainer::model
