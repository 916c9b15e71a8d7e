// AdamW against a hand-computed double step; sum_of_squares and sum_values accumulation.
#include "kernels/adamw.h"
#include "kernels/norm.h"

#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

TEST_CASE("adamw takes two steps as torch.optim.AdamW does", "[cpu][adamw]") {
  Context ctx;
  const int64_t n = 37;
  auto p = random_floats(n, 301), g1 = random_floats(n, 302), g2 = random_floats(n, 303);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd = to_double(p), md(n, 0.0), vd(n, 0.0);
  AdamWArgs args;
  args.lr = 1e-2f;
  args.beta1 = 0.9f;
  args.beta2 = 0.95f;
  args.eps = 1e-8f;
  args.weight_decay = 0.1f;
  const float scales[2] = {0.5f, 1.0f};
  for (int step = 1; step <= 2; ++step) {
    args.step = step;
    args.grad_scale = scales[step - 1];
    const auto& g = step == 1 ? g1 : g2;
    cpu::adamw_update(ctx, view(p, {n}), view(const_cast<std::vector<float>&>(g), {n}), view(m, {n}),
                      view(v, {n}), args);
    const double b1 = args.beta1, b2 = args.beta2;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(g[i]) * scales[step - 1];
      md[i] = b1 * md[i] + (1 - b1) * gi;
      vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
      const double mhat = md[i] / (1 - std::pow(b1, step)), vhat = vd[i] / (1 - std::pow(b2, step));
      pd[i] -= double(args.lr) * (mhat / (std::sqrt(vhat) + double(args.eps)) + double(args.weight_decay) * pd[i]);
    }
    require_close(m, md, 1e-5, 1e-7, "adamw m");
    require_close(v, vd, 1e-5, 1e-9, "adamw v");
    require_close(p, pd, 1e-5, 1e-6, "adamw param");
  }
  // Step 1 moves every weight by about lr: the size of the bias-corrected first step.
  auto q = random_floats(n, 304);
  const auto q0 = q;
  std::vector<float> m2(n, 0.0f), v2(n, 0.0f);
  AdamWArgs first;
  first.lr = 1e-3f;
  cpu::adamw_update(ctx, view(q, {n}), view(g1, {n}), view(m2, {n}), view(v2, {n}), first);
  for (int64_t i = 0; i < n; ++i) REQUIRE(std::abs(q[i] - q0[i]) == Approx(1e-3).epsilon(1e-3));
}

TEST_CASE("sum_of_squares accumulates in double", "[cpu][norm]") {
  Context ctx;
  for (int64_t n : {1, 17, 100003}) {
    auto x = random_floats(n, 311, -3.0f, 3.0f);
    double want = 0.0;
    for (float xi : x) want += double(xi) * xi;
    std::vector<float> out = {2.5f};
    cpu::sum_of_squares(ctx, view(out, {1}), view(x, {n}));
    CHECK(out[0] == Approx(2.5 + want).epsilon(1e-6));
    cpu::sum_of_squares(ctx, view(out, {1}), view(x, {n}));
    CHECK(out[0] == Approx(2.5 + 2 * want).epsilon(1e-6));
  }
}

TEST_CASE("sum_values adds a tensor's sum to a double", "[cpu][norm]") {
  Context ctx;
  for (int64_t n : {1, 17, 100003}) {
    auto x = random_floats(n, 312, -3.0f, 3.0f);
    double want = 0.0;
    for (float xi : x) want += double(xi);
    double out = 1e9;  // an fp32 accumulator would lose the sum's low digits under this
    Tensor o(&out, {1}, DType::f64);
    cpu::sum_values(ctx, o, view(x, {n}));
    CHECK(out - 1e9 == Approx(want).epsilon(1e-9));
    cpu::sum_values(ctx, o, view(x, {n}));
    CHECK(out - 1e9 == Approx(2 * want).epsilon(1e-9));
  }
  std::vector<float> f1(1), f3(3);
  CHECK_THROWS_WITH(cpu::sum_values(ctx, view(f1, {1}), view(f3, {3})),
                    Catch::Contains("must be one fp64 value"));
}
