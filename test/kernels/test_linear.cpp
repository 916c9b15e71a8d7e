// linear_forward / linear_backward against a double reference and finite differences.
#include "kernels/linear.h"

#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

std::vector<double> ref_linear(const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>* b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = b ? (*b)[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
  return y;
}

void check_linear(int64_t M, int64_t K, int64_t N, bool with_bias) {
  INFO("M " << M << " K " << K << " N " << N << " bias " << with_bias);
  Context ctx;
  auto x = random_floats(M * K, 1), w = random_floats(N * K, 2), b = random_floats(N, 3);
  auto dy = random_floats(M * N, 4);
  std::vector<float> y(M * N, 7.0f);
  cpu::linear_forward(ctx, view(y, {M, N}), view(x, {M, K}), view(w, {N, K}),
                      with_bias ? view(b, {N}) : Tensor());
  const auto xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
  const std::vector<double>* bp = with_bias ? &bd : nullptr;
  require_close(y, ref_linear(xd, wd, bp, M, K, N), 1e-5, 1e-5, "linear out");

  // Gradients start non-zero so accumulation into them is visible.
  std::vector<float> dx(M * K, 5.0f), dw0 = random_floats(N * K, 5), db0 = random_floats(N, 6);
  std::vector<float> dw = dw0, db = db0;
  cpu::linear_backward(ctx, view(dx, {M, K}), view(dw, {N, K}),
                       with_bias ? view(db, {N}) : Tensor(), view(dy, {M, N}), view(x, {M, K}),
                       view(w, {N, K}));
  auto gx = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_linear(v, wd, bp, M, K, N)); }, xd);
  auto gw = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_linear(xd, v, bp, M, K, N)); }, wd);
  for (size_t i = 0; i < gw.size(); ++i) gw[i] += dw0[i];
  require_close(dx, gx, 1e-4, 1e-4, "linear dinp");
  require_close(dw, gw, 1e-4, 1e-4, "linear dweight");
  if (with_bias) {
    auto gb = finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_linear(xd, wd, &v, M, K, N)); }, bd);
    for (size_t i = 0; i < gb.size(); ++i) gb[i] += db0[i];
    require_close(db, gb, 1e-4, 1e-4, "linear dbias");
  } else {
    CHECK(db == db0);
  }
}

}  // namespace

TEST_CASE("linear forward and backward match the double reference", "[cpu][linear]") {
  check_linear(5, 7, 3, true);     // N < M: rows split over threads
  check_linear(3, 8, 37, true);    // N > M: columns split over threads
  check_linear(1, 17, 1, true);    // ragged
  check_linear(17, 16, 33, false);  // no bias
  check_linear(40, 3, 50, true);   // more than one 16-row block per thread
}

TEST_CASE("linear_backward accumulates dweight and dbias, writes dinp, skips empty dinp",
          "[cpu][linear]") {
  Context ctx;
  const int64_t B = 2, T = 3, K = 4, N = 5;
  auto x = random_floats(B * T * K, 11), w = random_floats(N * K, 12), dy = random_floats(B * T * N, 13);
  std::vector<float> dx1(B * T * K), dx2(B * T * K, 9.0f), dw(N * K, 0.0f), db(N, 0.0f);
  cpu::linear_backward(ctx, view(dx1, {B, T, K}), view(dw, {N, K}), view(db, {N}),
                       view(dy, {B, T, N}), view(x, {B, T, K}), view(w, {N, K}));
  const auto dw1 = dw, db1 = db;
  cpu::linear_backward(ctx, view(dx2, {B, T, K}), view(dw, {N, K}), view(db, {N}),
                       view(dy, {B, T, N}), view(x, {B, T, K}), view(w, {N, K}));
  std::vector<double> twice_w(dw1.begin(), dw1.end()), twice_b(db1.begin(), db1.end());
  for (double& g : twice_w) g *= 2;
  for (double& g : twice_b) g *= 2;
  require_close(dw, twice_w, 1e-6, 0.0, "dweight after two calls");
  require_close(db, twice_b, 1e-6, 0.0, "dbias after two calls");
  CHECK(dx1 == dx2);  // written, not accumulated (dx2 started at 9)

  std::vector<float> dw3(N * K, 0.0f);
  cpu::linear_backward(ctx, Tensor(), view(dw3, {N, K}), Tensor(), view(dy, {B, T, N}),
                       view(x, {B, T, K}), view(w, {N, K}));
  CHECK(dw3 == dw1);
}

TEST_CASE("linear refuses wrong shapes and dtypes", "[cpu][linear]") {
  Context ctx;
  std::vector<float> x(6), w(6), y(4);
  std::vector<int32_t> xi(6);
  CHECK_THROWS_AS(cpu::linear_forward(ctx, view(y, {2, 2}), view(x, {2, 3}), view(w, {3, 2}), Tensor()),
                  Error);
  CHECK_THROWS_AS(cpu::linear_forward(ctx, view(y, {2, 2}), view(xi, {2, 3}), view(w, {2, 3}), Tensor()),
                  Error);
  CHECK_NOTHROW(cpu::linear_forward(ctx, view(y, {2, 2}), view(x, {2, 3}), view(w, {2, 3}), Tensor()));
}
