// The attention kernels over this rank's tokens, for every attention layer
// (attention_layer.h, mla_layer.h): plain causal attention over the local
// sequence, or under context parallelism each of the rank's two query chunks
// against the whole sequence's keys and values, gathered over cp (in forward,
// and again in backward rather than kept), their gradients reduce-scattered
// back to their owners. Documents (LayerEnv::doc_start) and a sliding window
// mask keys as attention.h says.
#pragma once

#include <vector>

#include "model/layer_env.h"
#include "model/scratch.h"
#include "parallel/cp_layout.h"

namespace trainer::model {

class AttentionCore {
 public:
  AttentionCore() = default;
  // Local (B, T, heads, D) queries of `heads` heads reading `kv_heads` KV heads.
  AttentionCore(const ModelConfig& cfg, const BatchShape& batch, int64_t heads, int64_t kv_heads,
                int64_t head_dim, int64_t window);
  // The log-sum-exp buffer's shape: (B, H, T), or one (B, H, c) block per local chunk.
  std::vector<int64_t> lse_shape() const;
  // The op scratch the kernels take (Buffers::declare_op_scratch).
  size_t scratch_bytes(DType dtype, bool fused) const;
  // att (B, T, H, D), lse written from q (B, T, H, D), k and v (B, T, Hkv, D).
  void forward(const LayerEnv& env, const Scratch& s, Tensor att, Tensor lse, Tensor q, Tensor k,
               Tensor v) const;
  // dq (B, T, H, D), dk and dv (B, T, Hkv, D) written from datt and forward's tensors.
  void backward(const LayerEnv& env, const Scratch& s, Tensor dq, Tensor dk, Tensor dv, Tensor datt,
                Tensor q, Tensor k, Tensor v, Tensor att, Tensor lse) const;
  const parallel::CpLayout& cp() const { return cp_; }

 private:
  Tensor docs(const LayerEnv& env) const;  // (B, T) first keys, or empty
  // The whole sequence's keys and values (B, T_global, Hkv, D) in the cp scratch.
  void gather_kv(const LayerEnv& env, const Scratch& s, Tensor k, Tensor v, Tensor kg,
                 Tensor vg) const;
  Tensor whole(const LayerEnv& env, BufferId id) const;  // a cp scratch as (B, T_global, Hkv, D)

  parallel::CpLayout cp_;
  int64_t B_ = 0, T_ = 0, H_ = 0, Hkv_ = 0, D_ = 0, window_ = 0;
};

}  // namespace trainer::model
