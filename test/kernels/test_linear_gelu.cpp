// linear_gelu_forward / linear_dgelu_backward against a double reference and
// finite differences, and in fp32 bit for bit against the unfused ops they fuse.
#include <cmath>

#include "kernels/gelu.h"
#include "kernels/linear.h"
#include "kernels/linear_gelu.h"
#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// y (M, N) = gelu(p) (M, K) @ w (N, K)^T + b: the layer whose backward is linear_dgelu_backward.
std::vector<double> ref_proj(const std::vector<double>& p, const std::vector<double>& w,
                             const std::vector<double>& b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = b[n];
      for (int64_t k = 0; k < K; ++k) s += gelu(p[m * K + k]) * w[n * K + k];
      y[m * N + n] = s;
    }
  return y;
}

void check_forward(int64_t M, int64_t K, int64_t N, bool with_bias) {
  INFO("forward M " << M << " K " << K << " N " << N << " bias " << with_bias);
  Context ctx;
  auto x = random_floats(M * K, 1, -2.0f, 2.0f), w = random_floats(N * K, 2), b = random_floats(N, 3);
  Tensor bias = with_bias ? view(b, {N}) : Tensor();
  std::vector<float> act(M * N, 7.0f), pre(M * N, 7.0f);
  cpu::linear_gelu_forward(ctx, view(act, {M, N}), view(pre, {M, N}), view(x, {M, K}), view(w, {N, K}), bias);
  std::vector<double> want_pre(M * N), want_act(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = with_bias ? b[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * w[n * K + k];
      want_pre[m * N + n] = s;
      want_act[m * N + n] = gelu(s);
    }
  require_close(pre, want_pre, 1e-5, 1e-5, "pre");
  require_close(act, want_act, 1e-5, 1e-5, "act");
  // fp32: exactly the unfused linear and gelu.
  std::vector<float> pre2(M * N), act2(M * N);
  cpu::linear_forward(ctx, view(pre2, {M, N}), view(x, {M, K}), view(w, {N, K}), bias);
  cpu::gelu_forward(ctx, view(act2, {M, N}), view(pre2, {M, N}));
  CHECK(pre == pre2);
  CHECK(act == act2);
}

void check_backward(int64_t M, int64_t K, int64_t N, bool with_bias) {
  INFO("backward M " << M << " K " << K << " N " << N << " bias " << with_bias);
  Context ctx;
  auto p = random_floats(M * K, 4, -3.0f, 3.0f), w = random_floats(N * K, 5), b = random_floats(N, 6);
  auto dy = random_floats(M * N, 7);
  std::vector<float> act(M * K);
  cpu::gelu_forward(ctx, view(act, {M, K}), view(p, {M, K}));
  // Gradients start non-zero so accumulation into them is visible.
  const auto dw0 = random_floats(N * K, 8), db0 = random_floats(N, 9);
  std::vector<float> dpre(M * K, 5.0f), dw = dw0, db = db0;
  cpu::linear_dgelu_backward(ctx, view(dpre, {M, K}), view(dw, {N, K}),
                             with_bias ? view(db, {N}) : Tensor(), view(dy, {M, N}),
                             view(act, {M, K}), view(w, {N, K}), view(p, {M, K}));
  const auto pd = to_double(p), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
  auto gp = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_proj(v, wd, bd, M, K, N)); }, pd);
  auto gw = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_proj(pd, v, bd, M, K, N)); }, wd);
  auto gb = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_proj(pd, wd, v, M, K, N)); }, bd);
  for (size_t i = 0; i < gw.size(); ++i) gw[i] += dw0[i];
  for (size_t i = 0; i < gb.size(); ++i) gb[i] += db0[i];
  require_close(dpre, gp, 1e-4, 1e-4, "dpre");
  require_close(dw, gw, 1e-4, 1e-4, "dweight");
  if (with_bias) require_close(db, gb, 1e-4, 1e-4, "dbias");
  else CHECK(db == db0);
  // fp32: exactly the unfused linear backward then gelu backward.
  std::vector<float> dact(M * K), dw2 = dw0, db2 = db0;
  cpu::linear_backward(ctx, view(dact, {M, K}), view(dw2, {N, K}), with_bias ? view(db2, {N}) : Tensor(),
                       view(dy, {M, N}), view(act, {M, K}), view(w, {N, K}));
  cpu::gelu_backward(ctx, view(dact, {M, K}), view(dact, {M, K}), view(p, {M, K}));
  CHECK(dpre == dact);
  CHECK(dw == dw2);
  CHECK(db == db2);
}

}  // namespace

TEST_CASE("linear + GELU forward matches the double reference and the unfused ops",
          "[cpu][linear_gelu]") {
  check_forward(5, 7, 3, true);
  check_forward(1, 17, 1, true);
  check_forward(17, 16, 33, false);
  check_forward(40, 3, 50, true);
}

TEST_CASE("linear + GELU backward matches finite differences and the unfused ops",
          "[cpu][linear_gelu]") {
  check_backward(5, 7, 3, true);
  check_backward(1, 17, 1, true);
  check_backward(17, 16, 33, false);
  check_backward(12, 9, 20, true);
}

TEST_CASE("linear + GELU refuses mismatched outputs", "[cpu][linear_gelu]") {
  Context ctx;
  std::vector<float> x(6), w(6), act(4), pre(6);
  CHECK_THROWS_AS(cpu::linear_gelu_forward(ctx, view(act, {2, 2}), view(pre, {2, 3}), view(x, {2, 3}),
                                           view(w, {2, 3}), Tensor()),
                  Error);
  CHECK_THROWS_AS(cpu::linear_gelu_forward(ctx, view(act, {2, 2}), view(act, {2, 2}), view(x, {2, 3}),
                                           view(w, {2, 3}), Tensor()),
                  Error);
}
