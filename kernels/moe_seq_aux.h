// DeepSeek-V3's complementary sequence-wise balance loss (Megatron-Core's
// `seq_aux_loss`): the balance loss taken per sequence, not per micro-batch, so
// no single sequence may send its tokens to a few experts even when the batch
// as a whole is balanced. For sequence b of T tokens and E experts, K = top_k:
//
//   f[b, e] = E / (K T) * #{t in b : e in TopK(s_t)}     (bias-free, group-free)
//   P[b, e] = 1 / T * sum_{t in b} s'[t, e],   s'[t, e] = s[t, e] / sum_j s[t, j]
//   loss    = 1 / B * sum_b sum_e f[b, e] P[b, e]         (1 when balanced)
//
// s = softmax or sigmoid of the router logits. The top-K ranks the raw scores,
// without the aux_free selection bias or group limit, as the DeepSeek-V3 paper
// and Megatron's compute_routing_scores_for_aux_loss do; both scores are
// monotone in the logit, so it ranks logits (ties to the lower index) and no
// backend's exp can change a pick. f is a count, constant in the backward.
//
// A micro-batch's rows may be split over ranks (sequence parallelism, cp); each
// rank's rows of one sequence are one contiguous range (a rank's rows are in
// sequence order: model/moe_capacity.h), named by seq_rows (B, 2) i32 =
// (first row, rows), 0 rows for a sequence the rank holds none of. `sums`
// (B, 2E) f64 is [counts | score sums] per sequence, all-reduced over those
// ranks between sums and loss.
// logits and dlogits are fp32 (the router's); every sum is in double.
#pragma once

#include <cmath>

#include "kernels/dispatch.h"
#include "kernels/numeric.h"

namespace trainer {

// One token's reduction, the same code on both backends: the K-th pick of the
// (logit descending, index ascending) order, and the scores' normaliser.
struct SeqAuxRow {
  double shift = 0, denom = 1;  // s'[e] = exp(l - shift) / denom, or sigmoid(l) / denom
  float kth = 0;                // the K-th pick's logit
  int64_t kth_index = 0;        // and its index: chosen iff l > kth || (l == kth && e <= index)
};

TRAINER_HOST_DEVICE inline double seq_aux_sigmoid(float l) { return 1.0 / (1.0 + exp(-double(l))); }

TRAINER_HOST_DEVICE inline SeqAuxRow seq_aux_row(const float* l, int64_t E, int64_t K, bool sigmoid) {
  SeqAuxRow r;
  // K passes, each taking the best element after the previous pick in the order.
  float prev = INFINITY;
  int64_t prev_index = -1;
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      const float v = l[e];
      const bool after = v < prev || (v == prev && e > prev_index);
      if (after && (best < 0 || v > l[best])) best = e;
    }
    if (best < 0) break;  // K > E: refused by the ops' checks
    prev = l[best], prev_index = best;
  }
  r.kth = prev, r.kth_index = prev_index;
  if (sigmoid) {
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += seq_aux_sigmoid(l[e]);
    r.denom = s;
  } else {
    float m = l[0];
    for (int64_t e = 1; e < E; ++e) m = l[e] > m ? l[e] : m;
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += exp(double(l[e]) - double(m));
    r.shift = m, r.denom = s;
  }
  return r;
}

TRAINER_HOST_DEVICE inline double seq_aux_score(float l, const SeqAuxRow& r, bool sigmoid) {
  return (sigmoid ? seq_aux_sigmoid(l) : exp(double(l) - r.shift)) / r.denom;
}

TRAINER_HOST_DEVICE inline bool seq_aux_chosen(float l, int64_t e, const SeqAuxRow& r) {
  return l > r.kth || (l == r.kth && e <= r.kth_index);
}

// E / (B K T^2): the loss is this times sum_b sum_e counts[b, e] * score sums[b, e],
// so d loss / d s'[t, e] is this times the token's sequence's count c[e] (the
// whole sequence's, all-reduced).
TRAINER_HOST_DEVICE inline double seq_aux_factor(int64_t B, int64_t E, int64_t K, int64_t T) {
  return double(E) / (double(B) * double(K) * double(T) * double(T));
}

// One token's gradient: dl (E) += d(factor * sum_e count[e] s'[e]) / d logits,
// through s' = s / sum s (for softmax the identity, with the same result) and
// the scores. count: its sequence's counts; factor: scale * seq_aux_factor.
TRAINER_HOST_DEVICE inline void seq_aux_row_backward(float* dl, const float* l, const double* count,
                                                     int64_t E, int64_t K, double factor,
                                                     bool sigmoid) {
  const SeqAuxRow r = seq_aux_row(l, E, K, sigmoid);
  double dot = 0;  // sum_e g[e] s'[e], g = d loss / d s'
  for (int64_t e = 0; e < E; ++e) dot += factor * count[e] * seq_aux_score(l[e], r, sigmoid);
  for (int64_t e = 0; e < E; ++e) {
    const double g = factor * count[e];
    double d;
    if (sigmoid) {
      const double sg = seq_aux_sigmoid(l[e]);
      d = (g - dot) / r.denom * sg * (1.0 - sg);
    } else {
      d = seq_aux_score(l[e], r, sigmoid) * (g - dot);
    }
    dl[e] += static_cast<float>(d);
  }
}

#define TRAINER_OPS(NS)                                                                       \
  namespace NS {                                                                              \
  /* sums (B, 2E) f64 written: per sequence, [0, E) the tokens whose top_k holds e, [E, 2E)   */ \
  /* the sum of s'[t, e], over this rank's rows of logits (N, E) f32 named by seq_rows.      */ \
  /* max_rows: the most rows one sequence holds, which sizes the device's chunk grid and     */ \
  /* scratch (moe_seq_aux_scratch_bytes); a longer range is still summed, only slower.      */ \
  void moe_seq_aux_sums(Context& ctx, Tensor sums, Tensor logits, Tensor seq_rows,             \
                        int64_t max_rows, int64_t top_k, bool sigmoid);                        \
  /* loss (1) f32 written from the (all-reduced) sums of sequences of seq_len tokens;        */ \
  /* step_aux (1) f32 += coeff * loss, or empty (a recomputed forward: not counted).         */ \
  void moe_seq_aux_loss(Context& ctx, Tensor loss, Tensor step_aux, Tensor sums,               \
                        int64_t seq_len, int64_t top_k, float coeff);                          \
  /* dlogits (N, E) f32 += the gradient of scale * loss through s' and the scores, for the   */ \
  /* rows seq_rows names (others untouched).                                                 */ \
  void moe_seq_aux_backward(Context& ctx, Tensor dlogits, Tensor logits, Tensor seq_rows,      \
                            Tensor sums, int64_t seq_len, int64_t top_k, float scale,          \
                            bool sigmoid);                                                     \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void moe_seq_aux_sums(Context& ctx, Tensor sums, Tensor logits, Tensor seq_rows,
                             int64_t max_rows, int64_t top_k, bool sigmoid) {
  TRAINER_DISPATCH(ctx, moe_seq_aux_sums, sums, logits, seq_rows, max_rows, top_k, sigmoid);
}
inline void moe_seq_aux_loss(Context& ctx, Tensor loss, Tensor step_aux, Tensor sums,
                             int64_t seq_len, int64_t top_k, float coeff) {
  TRAINER_DISPATCH(ctx, moe_seq_aux_loss, loss, step_aux, sums, seq_len, top_k, coeff);
}
inline void moe_seq_aux_backward(Context& ctx, Tensor dlogits, Tensor logits, Tensor seq_rows,
                                 Tensor sums, int64_t seq_len, int64_t top_k, float scale,
                                 bool sigmoid) {
  TRAINER_DISPATCH(ctx, moe_seq_aux_backward, dlogits, logits, seq_rows, sums, seq_len, top_k,
                   scale, sigmoid);
}

// moe_seq_aux_loss's checks of sums (B, 2E) f64, both backends': returns E.
inline int64_t check_seq_aux_sums(const Tensor& sums, int64_t seq_len, int64_t top_k, const char* op) {
  TRAINER_CHECK(sums.ndim == 2 && sums.size(1) >= 2 && sums.size(1) % 2 == 0 &&
                    sums.dtype == DType::f64 && sums.contiguous(),
                "{}: sums {} must be contiguous (B, 2E) fp64", op, sums.str());
  const int64_t E = sums.size(1) / 2;
  TRAINER_CHECK(seq_len > 0 && top_k >= 1 && top_k <= E, "{}: seq_len {} and top_k {} of {} experts",
                op, seq_len, top_k, E);
  return E;
}

// The shape checks both backends make (they cannot read seq_rows' values on the
// device; the CPU op checks the ranges, and the model builds them from the layout).
inline void check_seq_aux_args(const Tensor& sums, const Tensor& logits, const Tensor& seq_rows,
                               int64_t top_k, const char* op) {
  TRAINER_CHECK(logits.ndim == 2 && logits.dtype == DType::f32 && logits.contiguous(),
                "{}: logits {} must be contiguous (N, E) fp32", op, logits.str());
  const int64_t E = logits.size(1);
  TRAINER_CHECK(seq_rows.ndim == 2 && seq_rows.size(1) == 2 && seq_rows.size(0) >= 1 &&
                    seq_rows.dtype == DType::i32 && seq_rows.contiguous(),
                "{}: seq_rows {} must be contiguous (B, 2) i32", op, seq_rows.str());
  const int64_t B = seq_rows.size(0);
  TRAINER_CHECK(sums.ndim == 2 && sums.size(0) == B && sums.size(1) == 2 * E &&
                    sums.dtype == DType::f64 && sums.contiguous(),
                "{}: sums {} must be contiguous ({}, {}) fp64", op, sums.str(), B, 2 * E);
  TRAINER_CHECK(E >= 1 && top_k >= 1 && top_k <= E, "{}: top_k {} of {} experts", op, top_k, E);
}

}  // namespace trainer
