// Input embedding: token table (padded vocab, C) and, for GPT-2, learned
// positions (max_seq_len, C). The token table is also the LM head when tied.
#pragma once

#include "model/layer_env.h"

namespace trainer::model {

class Embedding {
 public:
  void declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch);
  // out() (N, C) written from ids (N) int32
  void forward(const LayerEnv& env, Tensor ids) const;
  // dwte (and dwpe) accumulated from dout (N, C)
  void backward(const LayerEnv& env, Tensor dout, Tensor ids) const;
  Tensor out(const LayerEnv& env) const { return env.buf.get(out_); }
  ParamId token_table() const { return wte_; }

 private:
  int64_t T_ = 0;
  ParamId wte_, wpe_;
  BufferId out_ = -1;
};

}  // namespace trainer::model
