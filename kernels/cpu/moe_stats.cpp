// CPU router statistics (kernels/moe_stats.h). Each sum runs in index order in
// double (a column's over tokens ascending, the z-loss's over rows ascending),
// so the result does not depend on the thread count.
#include "kernels/moe_stats.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

double* f64(const Tensor& t, int64_t n, const char* op, const char* name) {
  TRAINER_CHECK(t.device == Device::cpu && t.dtype == DType::f64 && t.contiguous() &&
                    t.numel() == n,
                "{}: {} {} must be {} contiguous fp64 values on the CPU", op, name, t.str(), n);
  return static_cast<double*>(t.data);
}

}  // namespace

void moe_router_sums(Context&, Tensor sums, Tensor counts, Tensor probs, Tensor logits) {
  const char* op = "moe_router_sums";
  const int64_t N = probs.size(0), E = probs.size(-1);
  check_shape(probs, {N, E}, "moe_router_sums probs");
  check_shape(logits, {N, E}, "moe_router_sums logits");
  check_shape(counts, {2, E}, "moe_router_sums counts");
  TRAINER_CHECK(E >= 1, "{}: no experts", op);
  double* s = f64(sums, 3 * E + 1, op, "sums");
  const int32_t* cnt = i32(counts, op, "counts");
  Staging st(op);
  const float* p = st.in(probs, "probs");
  const float* l = st.in(logits, "logits");
  for (int64_t i = 0; i < 2 * E; ++i) s[i] = cnt[i];
  // Blocks of columns, rows ascending within each: a column's sum is one fixed chain.
  constexpr int64_t kCols = 64;
  double* col = s + 2 * E;
#pragma omp parallel for schedule(static)
  for (int64_t e0 = 0; e0 < E; e0 += kCols) {
    const int64_t e1 = std::min(E, e0 + kCols);
    for (int64_t e = e0; e < e1; ++e) col[e] = 0.0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t e = e0; e < e1; ++e) col[e] += p[n * E + e];
  }
  double z = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float* row = l + n * E;
    const double m = *std::max_element(row, row + E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(row[e] - m);
    const double lse = m + std::log(sum);
    z += lse * lse;
  }
  s[3 * E] = z;
}

void moe_router_losses(Context&, Tensor losses, Tensor load, Tensor step, Tensor step_aux,
                       Tensor sums, int64_t tokens, int64_t top_k, float balance_coeff,
                       float z_coeff) {
  const char* op = "moe_router_losses";
  TRAINER_CHECK(sums.numel() >= 4 && (sums.numel() - 1) % 3 == 0,
                "{}: sums {} must hold 3E + 1 values", op, sums.str());
  const int64_t E = (sums.numel() - 1) / 3;
  const double* s = f64(sums, 3 * E + 1, op, "sums");
  TRAINER_CHECK(tokens > 0 && top_k > 0, "{}: tokens {} and top_k {} must be positive", op, tokens,
                top_k);
  TRAINER_CHECK(step.empty() == step_aux.empty(), "{}: step and step_aux go together", op);
  check_shape(losses, {2}, "moe_router_losses losses");
  Staging st(op);
  float* out = st.out(losses, "losses");
  float* ld = nullptr;
  if (!load.empty()) {
    check_shape(load, {E}, "moe_router_losses load");
    ld = st.out(load, "load");
  }
  float *stp = nullptr, *aux = nullptr;
  if (!step.empty()) {
    check_shape(step, {2, E}, "moe_router_losses step");
    check_shape(step_aux, {1}, "moe_router_losses step_aux");
    stp = st.inout(step, "step");
    aux = st.inout(step_aux, "step_aux");
  }
  const double Ng = static_cast<double>(tokens);
  double balance = 0.0;
  for (int64_t e = 0; e < E; ++e) balance += s[e] * (s[2 * E + e] / Ng);
  balance *= double(E) / (Ng * double(top_k));
  out[0] = static_cast<float>(balance);
  out[1] = static_cast<float>(s[3 * E] / Ng);
  if (ld)
    for (int64_t e = 0; e < E; ++e) ld[e] = static_cast<float>(s[e]);
  if (stp) {
    for (int64_t i = 0; i < 2 * E; ++i) stp[i] += static_cast<float>(s[i]);
    aux[0] += balance_coeff * out[0] + z_coeff * out[1];
  }
  st.commit();
}

void moe_bias_update(Context&, Tensor bias, Tensor load, float rate) {
  const char* op = "moe_bias_update";
  TRAINER_CHECK(bias.ndim == 1 && bias.numel() >= 1, "{}: bias {} must be (E)", op, bias.str());
  const int64_t E = bias.numel();
  check_shape(load, {E}, "moe_bias_update load");
  float* b = f32(bias, op, "bias");
  const float* l = f32(load, op, "load");
  double mean = 0;
  for (int64_t e = 0; e < E; ++e) mean += l[e];
  mean /= double(E);
  for (int64_t e = 0; e < E; ++e) {
    const double err = mean - l[e];
    b[e] += rate * static_cast<float>((err > 0) - (err < 0));
  }
}

}  // namespace trainer::cpu
