// Multi-head latent attention (DeepSeek-V2/V3; Megatron-Core's
// MLASelfAttention), the llama family's attention when model.mla is given.
// Per token:
//   queries:  q = q_b(norm(q_a(x)))  (or q_proj(x) without a q latent), each
//             head [nope | rope], RoPE on the rope part;
//   latent:   [c_kv | k_rope] = kv_a(x); k_rope gets RoPE and is every head's;
//   keys and values: [k_nope | v] = kv_b(norm(c_kv)) per head; a key head is
//             [k_nope | k_rope], a value head v;
//   out = o_proj(attention(q, k, v)), softmax scale D^-0.5 (times DeepSeek's YaRN
//   multiplier m(mscale_all_dim)^2 with rope_scaling.mscale_all_dim).
// Tensor parallelism splits q_b (or q_proj), kv_b and o_proj by heads, as the
// attention layer does; the down-projections q_a and kv_a and their norms are
// whole on every tp rank, each rank's gradient of them covering its own heads
// (summed over tp). The attention kernels take one head size, so value heads
// are padded with zeros to the q/k head size and the output's padding is
// dropped: exact, at the cost of the padded columns in the P.V product.
// Documents, sliding windows and context parallelism (whole key and value
// heads gathered over cp) are the attention core's (attention_core.h).
#pragma once

#include <string>

#include "kernels/rope_scaling.h"
#include "model/attention_core.h"
#include "model/linear_layer.h"
#include "model/norm_layer.h"
#include "model/scratch.h"
#include "model/tp_io.h"

namespace trainer::model {

class Mla {
 public:
  // window: this layer's sliding window (ModelConfig::window_of; 0: none).
  void declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
               const BatchShape& batch, int64_t window);
  // out (R, C) = attention(in (R, C)); written
  void forward(const LayerEnv& env, const Scratch& s, Tensor out, Tensor in) const;
  // dinp (R, C) written from dout (R, C); parameter gradients accumulated
  void backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout, Tensor in) const;

 private:
  // (N, h, w) and (B, T, h, w) views of a buffer's first N * h * w elements.
  Tensor rows(Tensor t, int64_t h, int64_t w) const;
  Tensor seq(Tensor t, int64_t h, int64_t w) const;
  // RoPE (forward or backward) on the rope columns of q or its gradient
  // (N, H, D), through the rope-parts scratch.
  void rope_query(const LayerEnv& env, const Scratch& s, Tensor q, bool forward) const;

  AttentionCore core_;
  Rope rotary_;
  int64_t B_ = 0, T_ = 0, H_ = 0;  // H_: heads on this rank
  int64_t D_ = 0, nope_ = 0, rope_ = 0, v_ = 0, q_lora_ = 0, kv_lora_ = 0;
  // DeepSeek's YaRN softmax multiplier (mla_softmax_multiplier), applied to the
  // queries: the kernels' scale is fixed at D^-0.5.
  float q_scale_ = 1.0f;
  TpIo io_;
  Linear q_a_, q_b_, q_proj_, kv_a_, kv_b_, o_proj_;
  Norm q_a_norm_, kv_a_norm_;
  // q_a_out_: q_a's output (its norm's input); q_: the queries (RoPE applied);
  // c_kv_: the KV latent (its norm's input); k_, v_: whole key heads and value
  // heads padded to D; att_: attention's padded output; att_v_: its value columns.
  BufferId q_a_out_ = -1, q_ = -1, c_kv_ = -1, k_ = -1, v_pad_ = -1, att_ = -1, att_v_ = -1,
           lse_ = -1;
};

}  // namespace trainer::model
