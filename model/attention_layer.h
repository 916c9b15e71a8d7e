// Self-attention: q/k/v projections (column-parallel: each tp rank owns whole
// heads), RoPE (llama), causal GQA attention, output projection (row-parallel).
// Saves q, k, v (after RoPE), the attention output and its lse. Under context
// parallelism the rank's tokens are two chunks of each sequence: RoPE uses
// their global positions, keys and values of the whole sequence are gathered
// over cp (forward, and again in backward rather than kept), each query chunk
// attends to the keys up to its own position, and the key/value gradients go
// back to their owners summed over cp. Documents packed into a sequence:
// each query sees keys of its own document only, and RoPE may restart its
// positions at each document (LayerEnv::doc_start, positions). A sliding
// window (ModelConfig::window_of) hides the keys before it. With qk_norm
// (Qwen3) each q and k head is RMS-normalised before RoPE; the projections'
// outputs are kept as the norms' inputs.
#pragma once

#include <string>

#include "kernels/rope_scaling.h"
#include "model/attention_core.h"
#include "model/linear_layer.h"
#include "model/norm_layer.h"
#include "model/scratch.h"
#include "model/tp_io.h"

namespace trainer::model {

class Attention {
 public:
  // window: this layer's sliding window (ModelConfig::window_of; 0: none).
  void declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
               const BatchShape& batch, int64_t window);
  // out (R, C) = attention(in (R, C)); written
  void forward(const LayerEnv& env, const Scratch& s, Tensor out, Tensor in) const;
  // dinp (R, C) written from dout (R, C); parameter gradients accumulated
  void backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout, Tensor in) const;

 private:
  Tensor heads(const LayerEnv& env, BufferId id, int64_t h) const;  // (B, T, h, D) view
  // RoPE forward (sign +1) or backward (-1) in place on x (B, T, h, D) at its
  // tokens' global positions, or their positions in their documents.
  void rope(const LayerEnv& env, Tensor x, bool forward) const;

  AttentionCore core_;  // the kernels, under cp over the whole sequence
  bool rope_ = false;
  Rope rotary_;  // base and Llama 3.1 scaling
  int64_t B_ = 0, T_ = 0, H_ = 0, Hkv_ = 0, D_ = 0;  // H_, Hkv_: heads on this rank
  TpIo io_;
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
  bool qk_norm_ = false;
  Norm q_norm_, k_norm_;
  // q_ and k_: attention's operands (RoPE applied in place); q_in_ and k_in_:
  // the projections' outputs, the same buffers unless qk_norm.
  BufferId q_ = -1, k_ = -1, v_ = -1, att_ = -1, lse_ = -1, q_in_ = -1, k_in_ = -1;
};

}  // namespace trainer::model
