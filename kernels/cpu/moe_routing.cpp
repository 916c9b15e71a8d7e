// CPU mixture-of-experts routing ops. Every loop that adds into a token's row
// runs over tokens (each thread owns its rows, slots visited in k order), so
// results do not depend on the thread count.
#include "kernels/moe_routing.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

// Softmax or sigmoid of one row of logits.
void scores_row(float* p, const float* l, int64_t E, bool sigmoid) {
  if (sigmoid) {
    for (int64_t e = 0; e < E; ++e) p[e] = 1.0f / (1.0f + std::exp(-l[e]));
    return;
  }
  float m = l[0];
  for (int64_t e = 1; e < E; ++e) m = std::max(m, l[e]);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(l[e] - m);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t e = 0; e < E; ++e) p[e] *= inv;
}

}  // namespace

void moe_route_forward(Context&, Tensor probs, Tensor topk_idx, Tensor topk_weight,
                       Tensor logits, Tensor select_bias, bool sigmoid, bool normalize,
                       RouteGroups groups) {
  const char* op = "moe_route_forward";
  const int64_t N = logits.size(0), E = logits.size(-1), K = topk_idx.size(-1);
  check_shape(logits, {N, E}, "moe_route_forward logits");
  check_shape(probs, {N, E}, "moe_route_forward probs");
  check_shape(topk_idx, {N, K}, "moe_route_forward topk_idx");
  check_shape(topk_weight, {N, K}, "moe_route_forward topk_weight");
  TRAINER_CHECK(K >= 1 && K <= E, "{}: top_k {} must be in 1..{}", op, K, E);
  check_route_groups(groups, E, K, op);
  const bool grouped = groups.groups > 1;
  const int64_t group_size = E / groups.groups;
  Staging st(op);
  const float* l = st.in(logits, "logits");
  float* p = st.out(probs, "probs");
  int32_t* idx = i32w(topk_idx, op, "topk_idx");
  float* w = st.out(topk_weight, "topk_weight");
  const float* bias = nullptr;
  if (!select_bias.empty()) {
    check_shape(select_bias, {E}, "moe_route_forward select_bias");
    bias = st.in(select_bias, "select_bias");
  }
#pragma omp parallel
  {
  // Per thread: the row's keys, group scores and allowed groups (grouped only).
  std::vector<float> key(grouped ? E : 0), score(groups.groups);
  std::vector<char> allowed(groups.groups, 1);
#pragma omp for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* pn = p + n * E;
    scores_row(pn, l + n * E, E, sigmoid);
    int32_t* in = idx + n * K;
    float* wn = w + n * K;
    if (grouped) {
      for (int64_t e = 0; e < E; ++e) key[e] = pn[e] + (bias ? bias[e] : 0.0f);
      for (int64_t q = 0; q < groups.groups; ++q)
        score[q] = route_group_score(key.data() + q * group_size, group_size);
      route_pick_groups(allowed.data(), score.data(), groups.groups, groups.top);
    }
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      int64_t best = -1;
      float best_v = 0;
      for (int64_t e = 0; e < E; ++e) {
        if (!allowed[e / group_size]) continue;
        bool taken = false;
        for (int64_t j = 0; j < k; ++j) taken |= in[j] == e;
        if (taken) continue;
        const float v = pn[e] + (bias ? bias[e] : 0.0f);
        if (best < 0 || v > best_v) best = e, best_v = v;
      }
      in[k] = static_cast<int32_t>(best);
      wn[k] = pn[best];
      sum += pn[best];
    }
    if (normalize) {
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = 0; k < K; ++k) wn[k] *= inv;
    }
  }
  }
  st.commit();
}

void moe_route_backward(Context&, Tensor dlogits, Tensor dtopk_weight, Tensor logits,
                        Tensor probs, Tensor topk_idx, float z_grad, bool sigmoid,
                        bool normalize) {
  const char* op = "moe_route_backward";
  const int64_t N = logits.size(0), E = logits.size(-1), K = topk_idx.size(-1);
  check_shape(logits, {N, E}, "moe_route_backward logits");
  check_shape(probs, {N, E}, "moe_route_backward probs");
  check_shape(dlogits, {N, E}, "moe_route_backward dlogits");
  check_shape(topk_idx, {N, K}, "moe_route_backward topk_idx");
  check_shape(dtopk_weight, {N, K}, "moe_route_backward dtopk_weight");
  Staging st(op);
  float* dl = st.out(dlogits, "dlogits");
  const float* l = st.in(logits, "logits");
  const float* p = st.in(probs, "probs");
  const int32_t* idx = i32(topk_idx, op, "topk_idx");
  const float* dw = st.in(dtopk_weight, "dtopk_weight");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* pn = p + n * E;
    const float* ln = l + n * E;
    const int32_t* in = idx + n * K;
    const float* dwn = dw + n * K;
    float* dln = dl + n * E;
    // d probs: the combine weights' term.
    for (int64_t e = 0; e < E; ++e) dln[e] = 0.0f;
    if (normalize) {
      // w_j = p_j / S with S the sum of the chosen probs: dp_j = (g_j - sum_k g_k w_k) / S.
      double S = 0, gw = 0;
      for (int64_t k = 0; k < K; ++k) S += pn[in[k]];
      for (int64_t k = 0; k < K; ++k) gw += static_cast<double>(dwn[k]) * pn[in[k]] / S;
      for (int64_t k = 0; k < K; ++k) dln[in[k]] += static_cast<float>((dwn[k] - gw) / S);
    } else {
      for (int64_t k = 0; k < K; ++k) dln[in[k]] += dwn[k];
    }
    // Through the score function to the logits (dln holds d probs until here).
    if (sigmoid) {
      for (int64_t e = 0; e < E; ++e) dln[e] *= pn[e] * (1.0f - pn[e]);
    } else {
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(pn[e]) * dln[e];
      for (int64_t e = 0; e < E; ++e) dln[e] = pn[e] * (dln[e] - static_cast<float>(dot));
    }
    if (z_grad != 0.0f) {
      float m = ln[0];
      for (int64_t e = 1; e < E; ++e) m = std::max(m, ln[e]);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(ln[e] - m));
      const double lse = m + std::log(sum);
      for (int64_t e = 0; e < E; ++e)
        dln[e] += static_cast<float>(2.0 * z_grad * lse * std::exp(ln[e] - lse));
    }
  }
  st.commit();
}

void moe_plan(Context&, Tensor slot_src, Tensor assign_slot, Tensor load, Tensor kept,
              Tensor topk_idx, int64_t capacity, Tensor taken) {
  const char* op = "moe_plan";
  const int64_t N = topk_idx.size(0), K = topk_idx.size(-1), E = load.size(0);
  check_shape(topk_idx, {N, K}, "moe_plan topk_idx");
  check_shape(slot_src, {N * K}, "moe_plan slot_src");
  check_shape(assign_slot, {N * K}, "moe_plan assign_slot");
  check_shape(load, {E}, "moe_plan load");
  check_shape(kept, {E}, "moe_plan kept");
  const int32_t* idx = i32(topk_idx, op, "topk_idx");
  int32_t* src = i32w(slot_src, op, "slot_src");
  int32_t* slot = i32w(assign_slot, op, "assign_slot");
  int32_t* ld = i32w(load, op, "load");
  int32_t* kp = i32w(kept, op, "kept");
  const int32_t* used = nullptr;
  if (!taken.empty()) {
    check_shape(taken, {E}, "moe_plan taken");
    used = i32(taken, op, "taken");
  }
  // A counting sort: stable, so each expert's slots are in token order.
  std::vector<int64_t> next(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) ld[e] = 0;
  for (int64_t a = 0; a < N * K; ++a) {
    TRAINER_CHECK(idx[a] >= 0 && idx[a] < E, "{}: expert {} out of range {}", op, idx[a], E);
    ++ld[idx[a]];
  }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t room = std::max<int64_t>(0, capacity - (used ? used[e] : 0));
    kp[e] = capacity > 0 ? static_cast<int32_t>(std::min<int64_t>(ld[e], room)) : ld[e];
    next[e + 1] = next[e] + kp[e];
  }
  const int64_t total = next[E];
  std::vector<int64_t> end(next.begin() + 1, next.end());
  for (int64_t a = 0; a < N * K; ++a) {
    const int64_t e = idx[a];
    if (next[e] < end[e]) {
      src[next[e]] = static_cast<int32_t>(a);
      slot[a] = static_cast<int32_t>(next[e]++);
    } else {
      slot[a] = -1;
    }
  }
  for (int64_t s = total; s < N * K; ++s) src[s] = -1;
}

void moe_gather(Context&, Tensor out, Tensor inp, Tensor slot_src, int64_t top_k) {
  const char* op = "moe_gather";
  const int64_t S = out.size(0), C = out.size(-1), N = inp.size(0);
  check_shape(out, {S, C}, "moe_gather out");
  check_shape(inp, {N, C}, "moe_gather inp");
  check_shape(slot_src, {S}, "moe_gather slot_src");
  Staging st(op);
  float* o = st.out(out, "out");
  const float* x = st.in(inp, "inp");
  const int32_t* src = i32(slot_src, op, "slot_src");
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < S; ++s) {
    if (src[s] < 0)
      std::memset(o + s * C, 0, C * sizeof(float));
    else
      std::memcpy(o + s * C, x + (src[s] / top_k) * C, C * sizeof(float));
  }
  st.commit();
}

void moe_gather_backward(Context&, Tensor dinp, Tensor dout, Tensor assign_slot) {
  const char* op = "moe_gather_backward";
  const int64_t N = dinp.size(0), C = dinp.size(-1), S = dout.size(0), K = S / N;
  check_shape(dinp, {N, C}, "moe_gather_backward dinp");
  check_shape(dout, {N * K, C}, "moe_gather_backward dout");
  check_shape(assign_slot, {N * K}, "moe_gather_backward assign_slot");
  Staging st(op);
  float* dx = st.inout(dinp, "dinp");
  const float* dy = st.in(dout, "dout");
  const int32_t* slot = i32(assign_slot, op, "assign_slot");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t s = slot[n * K + k];
      if (s < 0) continue;
      for (int64_t c = 0; c < C; ++c) dx[n * C + c] += dy[s * C + c];
    }
  st.commit();
}

void moe_combine(Context&, Tensor out, Tensor expert_out, Tensor assign_slot,
                 Tensor topk_weight) {
  const char* op = "moe_combine";
  const int64_t N = out.size(0), C = out.size(-1), K = topk_weight.size(-1);
  check_shape(out, {N, C}, "moe_combine out");
  check_shape(expert_out, {N * K, C}, "moe_combine expert_out");
  check_shape(assign_slot, {N * K}, "moe_combine assign_slot");
  check_shape(topk_weight, {N, K}, "moe_combine topk_weight");
  Staging st(op);
  float* o = st.inout(out, "out");
  const float* y = st.in(expert_out, "expert_out");
  const int32_t* slot = i32(assign_slot, op, "assign_slot");
  const float* w = st.in(topk_weight, "topk_weight");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t s = slot[n * K + k];
      if (s < 0) continue;
      const float wk = w[n * K + k];
      for (int64_t c = 0; c < C; ++c) o[n * C + c] += wk * y[s * C + c];
    }
  st.commit();
}

void moe_combine_backward(Context&, Tensor dexpert_out, Tensor dtopk_weight, Tensor dout,
                          Tensor expert_out, Tensor assign_slot, Tensor slot_src,
                          Tensor topk_weight) {
  const char* op = "moe_combine_backward";
  const int64_t N = dout.size(0), C = dout.size(-1), K = topk_weight.size(-1);
  check_shape(dout, {N, C}, "moe_combine_backward dout");
  check_shape(dexpert_out, {N * K, C}, "moe_combine_backward dexpert_out");
  check_shape(expert_out, {N * K, C}, "moe_combine_backward expert_out");
  check_shape(dtopk_weight, {N, K}, "moe_combine_backward dtopk_weight");
  check_shape(assign_slot, {N * K}, "moe_combine_backward assign_slot");
  check_shape(slot_src, {N * K}, "moe_combine_backward slot_src");
  check_shape(topk_weight, {N, K}, "moe_combine_backward topk_weight");
  Staging st(op);
  float* dy = st.out(dexpert_out, "dexpert_out");
  float* dw = st.out(dtopk_weight, "dtopk_weight");
  const float* g = st.in(dout, "dout");
  const float* y = st.in(expert_out, "expert_out");
  const int32_t* slot = i32(assign_slot, op, "assign_slot");
  const int32_t* src = i32(slot_src, op, "slot_src");
  const float* w = st.in(topk_weight, "topk_weight");
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < N * K; ++s) {
    float* d = dy + s * C;
    if (src[s] < 0) {
      std::memset(d, 0, C * sizeof(float));
      continue;
    }
    const float ws = w[src[s]];
    const float* gn = g + (src[s] / K) * C;
    for (int64_t c = 0; c < C; ++c) d[c] = ws * gn[c];
  }
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < N * K; ++a) {
    const int32_t s = slot[a];
    double dot = 0;
    if (s >= 0)
      for (int64_t c = 0; c < C; ++c)
        dot += static_cast<double>(g[(a / K) * C + c]) * y[s * C + c];
    dw[a] = static_cast<float>(dot);
  }
  st.commit();
}

}  // namespace trainer::cpu
