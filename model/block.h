// Transformer block (pre-norm): x + attn(norm1(x)), then + mlp(norm2(.)).
// Saves the mid-block residual and its output (the next block's input).
#pragma once

#include <string>

#include "model/attention_layer.h"
#include "model/mla_layer.h"
#include "model/mlp_layer.h"
#include "model/moe_layer.h"
#include "model/norm_layer.h"

namespace trainer::model {

class Block {
 public:
  // recompute: the block's internals go to the region every recomputed
  // block shares (ModelConfig::recomputes), its forward rerun before backward.
  void declare(Buffers& buf, int layer, const ModelConfig& cfg, const BatchShape& batch,
               bool recompute);
  // out() (R, C) written from in (R, C); R = residual_rows()
  void forward(const LayerEnv& env, const Scratch& s, Tensor in) const;
  // dres (R, C): on entry d(out), on return d(in), updated in place;
  // aux_dloss: the gradient of the objective w.r.t. an MoE layer's aux loss
  void backward(const LayerEnv& env, const Scratch& s, Tensor dres, Tensor in,
                float aux_dloss = 0.0f) const;
  const Moe* moe() const { return is_moe_ ? &moe_ : nullptr; }
  bool recomputed() const { return recompute_; }
  Tensor out(const LayerEnv& env) const { return env.buf.get(out_); }

 private:
  Norm norm1_, norm2_;
  Attention attn_;
  Mla mla_;  // the attention when ModelConfig::mla is on
  bool is_mla_ = false;
  Mlp mlp_;
  Moe moe_;
  bool is_moe_ = false;
  bool recompute_ = false;
  BufferId mid_ = -1, out_ = -1;
  // NVTX range names (Nsight Systems shows each layer's forward and backward).
  std::string nvtx_fwd_, nvtx_bwd_, nvtx_attn_fwd_, nvtx_attn_bwd_, nvtx_mlp_fwd_, nvtx_mlp_bwd_,
      nvtx_recompute_;
};

}  // namespace trainer::model
