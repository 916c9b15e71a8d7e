// A model config small enough for layout tests to build in microseconds:
// width 16, two heads (no GQA), vocab 100, 8 positions.
#pragma once

#include "model/model_config.h"

namespace trainer::testing {

inline model::ModelConfig tiny_model_config(model::Family family, int n_layer) {
  model::ModelConfig cfg;
  cfg.family = family;
  cfg.n_layer = n_layer;
  cfg.d_model = 16;
  cfg.n_head = 2;
  cfg.n_kv_head = 2;
  cfg.d_ff = 32;
  cfg.vocab_size = 100;
  cfg.max_seq_len = 8;
  cfg.tie_embeddings = family == model::Family::gpt2;
  return cfg;
}

}  // namespace trainer::testing
