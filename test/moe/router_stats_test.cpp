// The router statistics ops (kernels/moe_stats.h) on the CPU backend against
// sums written out here in long double: the counts and the z-loss's sum of
// squared logsumexps (without the max shift), then the z-loss and the step
// counters. (The balance losses are kernels/moe_seq_aux.h's: seq_aux_test.)
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/moe_stats.h"

using namespace trainer;

TEST_CASE("moe router stats: sums, z-loss and step counters", "[cpu][moe]") {
  for (int64_t E : {1, 5, 70})
    for (int64_t N : {1, 3, 257}) {
      INFO("N=" << N << " E=" << E);
      std::mt19937 rng(static_cast<uint32_t>(N * 100 + E));
      std::normal_distribution<float> nd(0.0f, 2.0f);
      std::uniform_int_distribution<int32_t> cd(0, static_cast<int32_t>(3 * N));
      std::vector<float> logits(N * E);
      for (float& x : logits) x = nd(rng);
      std::vector<int32_t> counts(2 * E);
      for (int32_t& c : counts) c = cd(rng);

      Context ctx;
      std::vector<double> sums(2 * E + 1, -7.0);
      const Tensor st(sums.data(), {2 * E + 1}, DType::f64);
      moe_router_sums(ctx, st, Tensor(counts.data(), {2, E}, DType::i32),
                      Tensor(logits.data(), {N, E}));
      for (int64_t i = 0; i < 2 * E; ++i) CHECK(sums[i] == counts[i]);
      long double z = 0;
      for (int64_t n = 0; n < N; ++n) {
        long double s = 0;
        for (int64_t e = 0; e < E; ++e) s += std::exp(static_cast<long double>(logits[n * E + e]));
        z += std::log(s) * std::log(s);
      }
      CHECK(sums[2 * E] == Approx(static_cast<double>(z)).epsilon(1e-12));

      // The z-loss over a micro-batch of Ng tokens.
      const int64_t Ng = 2 * N;
      const float zl = static_cast<float>(z / Ng);
      std::vector<float> zloss{-1}, step(2 * E, 0.5f), aux{0.25f};
      moe_router_losses(ctx, Tensor(zloss.data(), {1}), Tensor(step.data(), {2, E}),
                        Tensor(aux.data(), {1}), st, Ng, 0.01f);
      CHECK(zloss[0] == Approx(zl).epsilon(1e-6));
      for (int64_t i = 0; i < 2 * E; ++i) CHECK(step[i] == 0.5f + static_cast<float>(counts[i]));
      CHECK(aux[0] == Approx(0.25 + 0.01 * zloss[0]).epsilon(1e-6));
      // Not counted (a recomputed forward): the counters stay, the loss is written.
      std::vector<float> again{-1};
      moe_router_losses(ctx, Tensor(again.data(), {1}), {}, {}, st, Ng, 0.01f);
      CHECK(again == zloss);
      CHECK_THROWS_AS(moe_router_losses(ctx, Tensor(again.data(), {1}),
                                        Tensor(step.data(), {2, E}), {}, st, Ng, 0.01f),
                      Error);
      CHECK_THROWS_AS(moe_router_losses(ctx, Tensor(again.data(), {1}), {}, {}, st, 0, 0.01f),
                      Error);
    }
}

TEST_CASE("moe router stats: the z-loss of equal logits is log(E)^2", "[cpu][moe]") {
  const int64_t N = 12, E = 4;
  std::vector<float> logits(N * E, 0.0f);
  std::vector<int32_t> counts(2 * E, 6);
  std::vector<double> sums(2 * E + 1);
  Context ctx;
  const Tensor st(sums.data(), {2 * E + 1}, DType::f64);
  moe_router_sums(ctx, st, Tensor(counts.data(), {2, E}, DType::i32),
                  Tensor(logits.data(), {N, E}));
  float z = 0;
  moe_router_losses(ctx, Tensor(&z, {1}), {}, {}, st, N, 1.0f);
  CHECK(z == Approx(std::log(4.0) * std::log(4.0)));  // lse of E zeros is log E
}

TEST_CASE("moe_bias_update moves each bias by the rate towards the mean load", "[cpu][moe]") {
  // Loads 0, 5, 2, 5 (mean 3): experts below it gain, above it lose, and one
  // exactly at the mean stays (loads 3, 3 of a two-expert case).
  Context ctx;
  std::vector<float> bias = {0.5f, -0.25f, 0.0f, 1.0f}, load = {0, 5, 2, 5};
  moe_bias_update(ctx, Tensor(bias.data(), {4}), Tensor(load.data(), {4}), 0.125f);
  CHECK(bias == std::vector<float>{0.625f, -0.375f, 0.125f, 0.875f});
  std::vector<float> even_bias = {0.1f, 0.2f}, even = {3, 3};
  moe_bias_update(ctx, Tensor(even_bias.data(), {2}), Tensor(even.data(), {2}), 0.125f);
  CHECK(even_bias == std::vector<float>{0.1f, 0.2f});
  CHECK_THROWS_AS(moe_bias_update(ctx, Tensor(bias.data(), {4}), Tensor(load.data(), {3}), 0.1f),
                  Error);
}
