// layernorm and rmsnorm against double references and finite differences.
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"

#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

std::vector<double> ref_layernorm(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, int64_t N, int64_t C, double eps,
                                  std::vector<double>* mean = nullptr,
                                  std::vector<double>* rstd = nullptr) {
  std::vector<double> y(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double mu = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; ++c) mu += x[n * C + c];
    mu /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu);
    const double rs = 1.0 / std::sqrt(var / C + eps);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = (x[n * C + c] - mu) * rs * w[c] + b[c];
    if (mean) mean->push_back(mu);
    if (rstd) rstd->push_back(rs);
  }
  return y;
}

std::vector<double> ref_rmsnorm(const std::vector<double>& x, const std::vector<double>& w,
                                int64_t N, int64_t C, double eps,
                                std::vector<double>* rstd = nullptr) {
  std::vector<double> y(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double rs = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = x[n * C + c] * rs * w[c];
    if (rstd) rstd->push_back(rs);
  }
  return y;
}

void check_layernorm(int64_t N, int64_t C) {
  INFO("N " << N << " C " << C);
  Context ctx;
  const float eps = 1e-5f;
  auto x = random_floats(N * C, 21, -2.0f, 3.0f), w = random_floats(C, 22), b = random_floats(C, 23);
  auto dy = random_floats(N * C, 24);
  std::vector<float> y(N * C), mean(N), rstd(N);
  cpu::layernorm_forward(ctx, view(y, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}),
                         view(w, {C}), view(b, {C}), eps);
  const auto xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
  std::vector<double> mean_ref, rstd_ref;
  require_close(y, ref_layernorm(xd, wd, bd, N, C, eps, &mean_ref, &rstd_ref), 1e-5, 1e-5, "layernorm out");
  require_close(mean, mean_ref, 1e-5, 1e-6, "layernorm mean");
  require_close(rstd, rstd_ref, 1e-5, 0.0, "layernorm rstd");

  std::vector<float> dx(N * C, 3.0f), dw0 = random_floats(C, 25), db0 = random_floats(C, 26);
  std::vector<float> dw = dw0, db = db0;
  auto run_backward = [&](std::vector<float>& dxv) {
    cpu::layernorm_backward(ctx, view(dxv, {N, C}), view(dw, {C}), view(db, {C}), view(dy, {N, C}),
                            view(x, {N, C}), view(w, {C}), view(mean, {N}), view(rstd, {N}));
  };
  run_backward(dx);
  auto gx = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_layernorm(v, wd, bd, N, C, eps)); }, xd);
  auto gw = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_layernorm(xd, v, bd, N, C, eps)); }, wd);
  auto gb = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_layernorm(xd, wd, v, N, C, eps)); }, bd);
  std::vector<double> gw1 = gw, gb1 = gb;
  for (int64_t c = 0; c < C; ++c) gw1[c] += dw0[c], gb1[c] += db0[c];
  require_close(dx, gx, 1e-4, 1e-4, "layernorm dinp");
  require_close(dw, gw1, 1e-4, 1e-4, "layernorm dweight");
  require_close(db, gb1, 1e-4, 1e-4, "layernorm dbias");

  std::vector<float> dx2(N * C, -1.0f);
  run_backward(dx2);  // second micro-batch: gradients add up again, dinp is rewritten
  for (int64_t c = 0; c < C; ++c) gw1[c] += gw[c], gb1[c] += gb[c];
  require_close(dw, gw1, 1e-4, 1e-4, "layernorm dweight after two calls");
  require_close(db, gb1, 1e-4, 1e-4, "layernorm dbias after two calls");
  CHECK(dx2 == dx);
}

void check_rmsnorm(int64_t N, int64_t C) {
  INFO("N " << N << " C " << C);
  Context ctx;
  const float eps = 1e-6f;
  auto x = random_floats(N * C, 31, -2.0f, 3.0f), w = random_floats(C, 32), dy = random_floats(N * C, 33);
  std::vector<float> y(N * C), rstd(N);
  cpu::rmsnorm_forward(ctx, view(y, {N, C}), view(rstd, {N}), view(x, {N, C}), view(w, {C}), eps);
  const auto xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
  std::vector<double> rstd_ref;
  require_close(y, ref_rmsnorm(xd, wd, N, C, eps, &rstd_ref), 1e-5, 1e-6, "rmsnorm out");
  require_close(rstd, rstd_ref, 1e-5, 0.0, "rmsnorm rstd");

  std::vector<float> dx(N * C, 3.0f), dw0 = random_floats(C, 34);
  std::vector<float> dw = dw0;
  auto run_backward = [&](std::vector<float>& dxv) {
    cpu::rmsnorm_backward(ctx, view(dxv, {N, C}), view(dw, {C}), view(dy, {N, C}), view(x, {N, C}),
                          view(w, {C}), view(rstd, {N}));
  };
  run_backward(dx);
  auto gx = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_rmsnorm(v, wd, N, C, eps)); }, xd);
  auto gw = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_rmsnorm(xd, v, N, C, eps)); }, wd);
  std::vector<double> gw1 = gw;
  for (int64_t c = 0; c < C; ++c) gw1[c] += dw0[c];
  require_close(dx, gx, 1e-4, 1e-4, "rmsnorm dinp");
  require_close(dw, gw1, 1e-4, 1e-4, "rmsnorm dweight");
  std::vector<float> dx2(N * C, -1.0f);
  run_backward(dx2);
  for (int64_t c = 0; c < C; ++c) gw1[c] += gw[c];
  require_close(dw, gw1, 1e-4, 1e-4, "rmsnorm dweight after two calls");
  CHECK(dx2 == dx);
}

}  // namespace

TEST_CASE("layernorm matches the double reference and finite differences", "[cpu][layernorm]") {
  check_layernorm(1, 1);
  check_layernorm(1, 17);
  check_layernorm(7, 32);
  check_layernorm(33, 5);
}

TEST_CASE("rmsnorm matches the double reference and finite differences", "[cpu][rmsnorm]") {
  check_rmsnorm(1, 17);
  check_rmsnorm(7, 32);
  check_rmsnorm(33, 5);
}
