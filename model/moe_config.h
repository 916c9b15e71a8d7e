// MoeConfig: the shape and balancing of a mixture-of-experts layer (kept
// apart from moe_layer.h so ModelConfig can carry one).
#pragma once

namespace trainer::model {

enum class MoeBalance { aux_loss, aux_free, none };

struct MoeConfig {
  int n_experts = 8;
  int top_k = 2;
  int n_shared_experts = 0;
  bool shared_gate = false;       // shared experts' output x sigmoid(a per-token logit) (Qwen2-MoE)
  int d_ff_expert = 512;
  MoeBalance balance = MoeBalance::aux_loss;
  float aux_loss_coeff = 0.01f;   // used when balance == aux_loss
  float z_loss_coeff = 0.0f;      // router z-loss: coeff * mean_n logsumexp(logits_n)^2; 0 = off
  // DeepSeek-V3's complementary sequence-wise balance loss (kernels/moe_seq_aux.h),
  // with any `balance`; 0 = off.
  float seq_aux_loss_coeff = 0.0f;
  float capacity_factor = 0.0f;   // <= 0: dropless; else capacity = ceil(cf * N * K / E)
  // Dropless with ep > 1: each rank's expert rows are planned for this many
  // times the balanced load (or the worst case, when smaller); a micro-batch
  // routed beyond it is refused (model/moe_layer.h).
  double ep_recv_headroom = 2.0;
  bool sigmoid = false;           // DeepSeek-V3 scores; softmax otherwise
  bool normalize_topk = true;     // combine weights = chosen scores / their sum
  float topk_scaling = 1.0f;      // then times this (DeepSeek-V3's routed_scaling_factor)
  // Group-limited routing (DeepSeek-V3's n_group, topk_group): each token's
  // experts come from its top_groups best groups of n_experts / n_groups.
  int n_groups = 1;
  int top_groups = 1;

  // Expert parallelism: the routed experts are spread over `ep` ranks, rank
  // `ep_rank` holding experts [ep_rank * E/ep, (ep_rank + 1) * E/ep) (router,
  // shared experts and everything else are replicated). Set from the mesh.
  int ep = 1;
  int ep_rank = 0;
  int local_experts() const { return n_experts / ep; }
  int first_expert() const { return ep_rank * local_experts(); }
};

}  // namespace trainer::model
