// Transformer block. The residual gradient is updated in place, so backward
// through the whole stack needs one (N, C) buffer, not one per layer.
#include "model/block.h"

#include <fmt/format.h>

#include "kernels/cuda/nvtx.h"
#include "kernels/elementwise.h"

namespace trainer::model {

void Block::declare(Buffers& buf, int layer, const ModelConfig& cfg, const BatchShape& batch,
                    bool recompute) {
  recompute_ = recompute;
  int64_t N = residual_rows(cfg, batch), C = cfg.d_model;
  std::string p = cfg.is_llama() ? fmt::format("model.layers.{}", layer)
                                  : fmt::format("transformer.h.{}", layer);
  nvtx_fwd_ = p + " forward", nvtx_bwd_ = p + " backward";
  nvtx_attn_fwd_ = p + ".attention forward", nvtx_attn_bwd_ = p + ".attention backward";
  const std::string mlp = p + (cfg.is_moe_layer(layer) ? ".moe" : ".mlp");
  nvtx_mlp_fwd_ = mlp + " forward", nvtx_mlp_bwd_ = mlp + " backward";
  nvtx_recompute_ = p + " recompute";
  if (recompute_) buf.begin_recomputed_block();
  norm1_.declare(buf, p + (cfg.is_llama() ? ".input_layernorm" : ".ln_1"), cfg, N);
  is_mla_ = cfg.mla.enabled;
  if (is_mla_)
    mla_.declare(buf, p, cfg, batch, cfg.window_of(layer));
  else
    attn_.declare(buf, p, cfg, batch, cfg.window_of(layer));
  norm2_.declare(buf, p + (cfg.is_llama() ? ".post_attention_layernorm" : ".ln_2"), cfg, N);
  is_moe_ = cfg.is_moe_layer(layer);
  if (is_moe_)
    moe_.declare(buf, p, cfg, cfg.moe, batch);
  else
    mlp_.declare(buf, p, cfg, batch);
  mid_ = buf.add(Category::activations, p + ".residual_mid", {N, C}, buf.act_dtype());
  buf.end_recomputed_block();  // the output is the next block's input: kept
  out_ = buf.add(Category::activations, p + ".residual_out", {N, C}, buf.act_dtype());
}

void Block::forward(const LayerEnv& env, const Scratch& s, Tensor in) const {
  cuda::NvtxRange range(env.recompute ? nvtx_recompute_.c_str() : nvtx_fwd_.c_str());
  Tensor mid = env.buf.get(mid_), out = env.buf.get(out_);
  norm1_.forward(env, in);
  {
    cuda::NvtxRange attn(nvtx_attn_fwd_.c_str());
    if (is_mla_)
      mla_.forward(env, s, mid, norm1_.out(env));
    else
      attn_.forward(env, s, mid, norm1_.out(env));
  }
  accumulate(env.ctx, mid, in);
  norm2_.forward(env, mid);
  {
    cuda::NvtxRange mlp(nvtx_mlp_fwd_.c_str());
    if (is_moe_)
      moe_.forward(env, out, norm2_.out(env));
    else
      mlp_.forward(env, s, out, norm2_.out(env));
  }
  accumulate(env.ctx, out, mid);
}

void Block::backward(const LayerEnv& env, const Scratch& s, Tensor dres, Tensor in,
                     float aux_dloss) const {
  cuda::NvtxRange range(nvtx_bwd_.c_str());
  Tensor dln = env.buf.get(s.dln), dtmp = env.buf.get(s.dtmp);
  {
    cuda::NvtxRange mlp(nvtx_mlp_bwd_.c_str());
    if (is_moe_)
      moe_.backward(env, dln, dres, norm2_.out(env), aux_dloss);
    else
      mlp_.backward(env, s, dln, dres, norm2_.out(env));
  }
  norm2_.backward(env, dtmp, dln, env.buf.get(mid_));
  accumulate(env.ctx, dres, dtmp);
  {
    cuda::NvtxRange attn(nvtx_attn_bwd_.c_str());
    if (is_mla_)
      mla_.backward(env, s, dln, dres, norm1_.out(env));
    else
      attn_.backward(env, s, dln, dres, norm1_.out(env));
  }
  norm1_.backward(env, dtmp, dln, in);
  accumulate(env.ctx, dres, dtmp);
}

}  // namespace trainer::model
