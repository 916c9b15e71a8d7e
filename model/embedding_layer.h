// Input embedding: token table (padded vocab, C) and, for GPT-2, learned
// positions (max_seq_len, C). The token table is also the LM head when tied.
// Vocab-parallel: a tp rank holds a block of table rows, looks up only ids in
// it (zero rows elsewhere), and the partial embeddings are summed over tp.
// Context parallel: the rank's tokens are two chunks of each sequence, whose
// learned positions are their global ones.
#pragma once

#include "model/layer_env.h"
#include "model/scratch.h"

namespace trainer::model {

class Embedding {
 public:
  void declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch);
  // out() (R, C) written from ids (N) int32
  void forward(const LayerEnv& env, const Scratch& s, Tensor ids) const;
  // dwte (and dwpe) accumulated from dout (R, C)
  void backward(const LayerEnv& env, const Scratch& s, Tensor dout, Tensor ids) const;
  Tensor out(const LayerEnv& env) const { return env.buf.get(out_); }
  ParamId token_table() const { return wte_; }
  // Declares the token table alone: the embedding's own, or (tied_copy) the
  // LM head's copy of it on a last pipeline stage that holds no embedding.
  static ParamId declare_token_table(Buffers& buf, const ModelConfig& cfg, bool tied_copy);

 private:
  // The op over every run of consecutive positions: all tokens at once, or
  // one call per sequence and chunk under context parallelism.
  template <class Op>
  void by_positions(Tensor rows, Tensor ids, Op op) const;

  int64_t T_ = 0, vocab_start_ = 0;
  parallel::CpLayout cp_;
  bool sp_ = false, adds_positions_ = true;
  ParamId wte_, wpe_;
  BufferId out_ = -1;
};

}  // namespace trainer::model
