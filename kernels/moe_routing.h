// Mixture-of-experts routing ops: router scores and top-k selection, the
// per-expert dispatch plan (a permutation of token-expert assignments grouped
// by expert, with optional capacity dropping), gathering tokens into that
// order and the weighted combine back, with their backwards.
//
// Layout: N tokens, E experts, K = top_k. An assignment a = n * K + k is
// token n's k-th choice. The plan puts the kept assignments in S = N * K slots
// ordered by expert, then by token: slot_src[s] = a (or -1 past the kept
// ones) and assign_slot[a] = s (or -1 when dropped). Integer tensors are i32.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include <cmath>

#include "kernels/dispatch.h"
#include "kernels/numeric.h"

namespace trainer {

// Group-limited routing (DeepSeek-V3's n_group / topk_group): the E experts
// form `groups` equal groups of consecutive indices; a token first picks the
// `top` groups whose two best keys (prob + select_bias) sum highest (ties to the
// lower group), then its top_k among their experts only. groups 1 = off.
struct RouteGroups {
  int64_t groups = 1, top = 1;
};

// A group's score: the sum of its `size` keys' two best (a NaN never counts).
// Both backends call these two, so they rank the groups alike.
TRAINER_HOST_DEVICE inline float route_group_score(const float* key, int64_t size) {
  float t1 = -INFINITY, t2 = -INFINITY;
  for (int64_t e = 0; e < size; ++e) {
    const float v = key[e];
    if (v > t1) {
      t2 = t1;
      t1 = v;
    } else if (v > t2) {
      t2 = v;
    }
  }
  return t1 + t2;
}
// allowed[q] = 1 for the `top` best-scored of `groups` groups (a strictly
// larger score wins, ties to the lower group), 0 for the others.
template <class Flag>
TRAINER_HOST_DEVICE inline void route_pick_groups(Flag* allowed, const float* score, int64_t groups,
                                                  int64_t top) {
  for (int64_t q = 0; q < groups; ++q) allowed[q] = 0;
  for (int64_t j = 0; j < top; ++j) {
    int64_t best = -1;
    for (int64_t q = 0; q < groups; ++q)
      if (!allowed[q] && (best < 0 || score[q] > score[best])) best = q;
    if (best < 0) return;  // top > groups: refused by check_route_groups; stay in bounds
    allowed[best] = 1;
  }
}

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* probs (N, E) = softmax or sigmoid of logits (N, E), written. topk_idx (N, K) written: */ \
  /* the K largest probs + select_bias (E; may be empty), ties to the lower index, best    */ \
  /* first. topk_weight (N, K) written: the chosen probs, divided by their sum when        */ \
  /* normalize (the bias only selects; it never enters a weight). With route groups the   */ \
  /* top-k is taken among the chosen groups' experts.                                      */ \
  void moe_route_forward(Context& ctx, Tensor probs, Tensor topk_idx, Tensor topk_weight,    \
                         Tensor logits, Tensor select_bias, bool sigmoid, bool normalize,    \
                         RouteGroups groups = {});                                           \
  /* dlogits (N, E) written from dtopk_weight (N, K), plus the gradient of z_grad *        */ \
  /* sum_n logsumexp(logits[n])^2 (the router z-loss; 0 = none). The balance losses add    */ \
  /* theirs after (kernels/moe_seq_aux.h).                                                  */ \
  void moe_route_backward(Context& ctx, Tensor dlogits, Tensor dtopk_weight, Tensor logits,  \
                          Tensor probs, Tensor topk_idx, float z_grad, bool sigmoid,         \
                          bool normalize);                                                   \
  /* The dispatch plan from topk_idx (N, K): slot_src (N*K), assign_slot (N*K), load (E) =  */ \
  /* assignments per expert before dropping, kept (E) = after; all written. capacity <= 0  */ \
  /* keeps everything; otherwise each expert keeps its first `capacity - taken[e]`         */ \
  /* assignments in token order (none when negative). taken (E) i32, may be empty (zeros):  */ \
  /* what earlier token blocks of the same micro-batch routed to each expert, kept or not  */ \
  /* (sequence parallelism: tp rank r's tokens follow ranks < r's).                        */ \
  void moe_plan(Context& ctx, Tensor slot_src, Tensor assign_slot, Tensor load, Tensor kept,  \
                Tensor topk_idx, int64_t capacity, Tensor taken);                            \
  /* out (S, C): row s = inp (N, C) row slot_src[s] / K, or zeros for an unused slot;      */ \
  /* written                                                                              */ \
  void moe_gather(Context& ctx, Tensor out, Tensor inp, Tensor slot_src, int64_t top_k);      \
  /* dinp (N, C) += the rows of dout (S, C) of each token's kept slots; accumulated        */ \
  void moe_gather_backward(Context& ctx, Tensor dinp, Tensor dout, Tensor assign_slot);       \
  /* out (N, C) += sum over token n's kept slots s of topk_weight[a] * expert_out[s];      */ \
  /* accumulated (dropped assignments contribute nothing)                                  */ \
  void moe_combine(Context& ctx, Tensor out, Tensor expert_out, Tensor assign_slot,           \
                   Tensor topk_weight);                                                      \
  /* dexpert_out (S, C) written: topk_weight[a] * dout[n] for a kept slot, zeros otherwise; */ \
  /* dtopk_weight (N, K) written: dout[n] . expert_out[slot of a], 0 when dropped          */ \
  void moe_combine_backward(Context& ctx, Tensor dexpert_out, Tensor dtopk_weight,           \
                            Tensor dout, Tensor expert_out, Tensor assign_slot,              \
                            Tensor slot_src, Tensor topk_weight);                            \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void moe_route_forward(Context& ctx, Tensor probs, Tensor topk_idx, Tensor topk_weight,
                              Tensor logits, Tensor select_bias, bool sigmoid, bool normalize,
                              RouteGroups groups = {}) {
  TRAINER_DISPATCH(ctx, moe_route_forward, probs, topk_idx, topk_weight, logits, select_bias,
                   sigmoid, normalize, groups);
}
// The refusal both backends give for route groups that do not fit (E, K).
inline void check_route_groups(const RouteGroups& g, int64_t E, int64_t K, const char* op) {
  if (g.groups == 1 && g.top == 1) return;
  TRAINER_CHECK(g.groups >= 1 && E % g.groups == 0 && E / g.groups >= 2,
                "{}: {} route groups must split the {} experts into equal groups of 2 or more", op,
                g.groups, E);
  TRAINER_CHECK(g.top >= 1 && g.top <= g.groups && K <= g.top * (E / g.groups),
                "{}: top {} of {} route groups must be at least 1, at most the groups, and hold "
                "top_k {} experts", op, g.top, g.groups, K);
}
inline void moe_route_backward(Context& ctx, Tensor dlogits, Tensor dtopk_weight, Tensor logits,
                               Tensor probs, Tensor topk_idx, float z_grad, bool sigmoid,
                               bool normalize) {
  TRAINER_DISPATCH(ctx, moe_route_backward, dlogits, dtopk_weight, logits, probs, topk_idx, z_grad,
                   sigmoid, normalize);
}
inline void moe_plan(Context& ctx, Tensor slot_src, Tensor assign_slot, Tensor load, Tensor kept,
                     Tensor topk_idx, int64_t capacity, Tensor taken = {}) {
  TRAINER_DISPATCH(ctx, moe_plan, slot_src, assign_slot, load, kept, topk_idx, capacity, taken);
}
inline void moe_gather(Context& ctx, Tensor out, Tensor inp, Tensor slot_src, int64_t top_k) {
  TRAINER_DISPATCH(ctx, moe_gather, out, inp, slot_src, top_k);
}
inline void moe_gather_backward(Context& ctx, Tensor dinp, Tensor dout, Tensor assign_slot) {
  TRAINER_DISPATCH(ctx, moe_gather_backward, dinp, dout, assign_slot);
}
inline void moe_combine(Context& ctx, Tensor out, Tensor expert_out, Tensor assign_slot,
                        Tensor topk_weight) {
  TRAINER_DISPATCH(ctx, moe_combine, out, expert_out, assign_slot, topk_weight);
}
inline void moe_combine_backward(Context& ctx, Tensor dexpert_out, Tensor dtopk_weight,
                                 Tensor dout, Tensor expert_out, Tensor assign_slot,
                                 Tensor slot_src, Tensor topk_weight) {
  TRAINER_DISPATCH(ctx, moe_combine_backward, dexpert_out, dtopk_weight, dout, expert_out,
                   assign_slot, slot_src, topk_weight);
}

}  // namespace trainer
