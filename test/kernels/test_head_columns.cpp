// copy_head_columns (kernels/head_columns.h) on the CPU against plain loops:
// head to head, one head broadcast to every head, every head summed into one
// (the broadcast's backward: the sum equals the adjoint of the broadcast), the
// columns it does not write untouched, and its refusals.
#include <catch2/catch.hpp>

#include "kernels/head_columns.h"
#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

// out (R, Ho, Do) after copying columns [ic, ic + w) of in (R, Hi, Di) to [oc, oc + w).
std::vector<double> reference(std::vector<double> out, const std::vector<double>& in, int64_t R,
                              int64_t Ho, int64_t Do, int64_t Hi, int64_t Di, int64_t oc,
                              int64_t ic, int64_t w) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < w; ++j) {
      if (Ho == 1 && Hi > 1) {
        double sum = 0;
        for (int64_t h = 0; h < Hi; ++h) sum += in[(r * Hi + h) * Di + ic + j];
        out[r * Do + oc + j] = sum;
      } else {
        for (int64_t h = 0; h < Ho; ++h)
          out[(r * Ho + h) * Do + oc + j] = in[(r * Hi + (Hi == 1 ? 0 : h)) * Di + ic + j];
      }
    }
  return out;
}

}  // namespace

TEST_CASE("copy_head_columns: copies, broadcasts and sums heads' column blocks", "[cpu][kernels]") {
  Context ctx;
  const int64_t R = 7, H = 4, Do = 10, Di = 12, w = 5, oc = 3, ic = 6;
  for (auto [Ho, Hi] : {std::pair<int64_t, int64_t>{H, H}, {H, 1}, {1, H}}) {
    INFO("out heads " << Ho << ", in heads " << Hi);
    std::vector<float> in = random_floats(R * Hi * Di, 3), out = random_floats(R * Ho * Do, 5);
    const std::vector<double> want =
        reference(to_double(out), to_double(in), R, Ho, Do, Hi, Di, oc, ic, w);
    cpu::copy_head_columns(ctx, view(out, {R, Ho, Do}), oc, view(in, {R, Hi, Di}), ic, w);
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == Approx(want[i]).epsilon(1e-6));
  }
  // The sum is the broadcast's adjoint: <broadcast(a), b> = <a, sum(b)>.
  std::vector<float> a = random_floats(R * 1 * w, 7), b = random_floats(R * H * w, 9);
  std::vector<float> wide(R * H * w, 0.0f), summed(R * w, 0.0f);
  cpu::copy_head_columns(ctx, view(wide, {R, H, w}), 0, view(a, {R, 1, w}), 0, w);
  cpu::copy_head_columns(ctx, view(summed, {R, 1, w}), 0, view(b, {R, H, w}), 0, w);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < wide.size(); ++i) lhs += double(wide[i]) * b[i];
  for (size_t i = 0; i < summed.size(); ++i) rhs += double(a[i]) * summed[i];
  CHECK(lhs == Approx(rhs).epsilon(1e-5));

  std::vector<float> x(2 * 3 * 8), x2(2 * 3 * 8), y(2 * 2 * 8), z(3 * 3 * 8);
  CHECK_THROWS_AS(cpu::copy_head_columns(ctx, view(y, {2, 2, 8}), 0, view(x, {2, 3, 8}), 0, 4), Error);
  CHECK_THROWS_AS(cpu::copy_head_columns(ctx, view(x, {2, 3, 8}), 0, view(z, {3, 3, 8}), 0, 4), Error);
  CHECK_THROWS_AS(cpu::copy_head_columns(ctx, view(x, {2, 3, 8}), 5, view(x2, {2, 3, 8}), 0, 4), Error);
  CHECK_THROWS_AS(cpu::copy_head_columns(ctx, view(x, {2, 3, 8}), 0, view(x, {2, 3, 8}), 0, 4), Error);
}
