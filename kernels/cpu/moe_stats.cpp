// CPU router statistics (kernels/moe_stats.h). The z-loss's sum runs over rows
// ascending in double, so the result does not depend on the thread count.
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

void moe_router_sums(Context&, Tensor sums, Tensor counts, Tensor logits) {
  const char* op = "moe_router_sums";
  TRAINER_CHECK(logits.ndim == 2, "{}: logits {} must be 2-D", op, logits.str());
  const int64_t N = logits.size(0), E = logits.size(-1);
  check_shape(counts, {2, E}, "moe_router_sums counts");
  TRAINER_CHECK(E >= 1, "{}: no experts", op);
  double* s = f64(sums, 2 * E + 1, op, "sums");
  const int32_t* cnt = i32(counts, op, "counts");
  Staging st(op);
  const float* l = st.in(logits, "logits");
  for (int64_t i = 0; i < 2 * E; ++i) s[i] = cnt[i];
  double z = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float* row = l + n * E;
    const double m = *std::max_element(row, row + E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(row[e] - m);
    const double lse = m + std::log(sum);
    z += lse * lse;
  }
  s[2 * E] = z;
}

void moe_router_losses(Context&, Tensor z_loss, Tensor step, Tensor step_aux, Tensor sums,
                       int64_t tokens, float z_coeff) {
  const char* op = "moe_router_losses";
  TRAINER_CHECK(sums.numel() >= 3 && (sums.numel() - 1) % 2 == 0,
                "{}: sums {} must hold 2E + 1 values", op, sums.str());
  const int64_t E = (sums.numel() - 1) / 2;
  const double* s = f64(sums, 2 * E + 1, op, "sums");
  TRAINER_CHECK(tokens > 0, "{}: tokens {} must be positive", op, tokens);
  TRAINER_CHECK(step.empty() == step_aux.empty(), "{}: step and step_aux go together", op);
  check_shape(z_loss, {1}, "moe_router_losses z_loss");
  Staging st(op);
  float* out = st.out(z_loss, "z_loss");
  float *stp = nullptr, *aux = nullptr;
  if (!step.empty()) {
    check_shape(step, {2, E}, "moe_router_losses step");
    check_shape(step_aux, {1}, "moe_router_losses step_aux");
    stp = st.inout(step, "step");
    aux = st.inout(step_aux, "step_aux");
  }
  out[0] = static_cast<float>(s[2 * E] / static_cast<double>(tokens));
  if (stp) {
    for (int64_t i = 0; i < 2 * E; ++i) stp[i] += static_cast<float>(s[i]);
    aux[0] += z_coeff * out[0];
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
