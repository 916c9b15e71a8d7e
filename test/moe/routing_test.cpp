// MoE routing ops: top-k selection and weights, the dispatch plan (every
// token lands exactly top_k times, grouped by expert), combine inverting
// dispatch, the selection bias and capacity dropping.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/moe_routing.h"

using namespace trainer;

namespace {

struct Routed {
  int64_t N, E, K;
  std::vector<float> logits, probs, w;
  std::vector<int32_t> idx, slot_src, assign_slot, load, kept;

  Routed(int64_t N_, int64_t E_, int64_t K_, uint32_t seed, std::vector<float> bias = {},
         bool sigmoid = false, int64_t capacity = 0)
      : N(N_), E(E_), K(K_), logits(N * E), probs(N * E), w(N * K), idx(N * K),
        slot_src(N * K), assign_slot(N * K), load(E), kept(E) {
    Context ctx;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (auto& x : logits) x = nd(rng);
    Tensor b = bias.empty() ? Tensor{} : Tensor(bias.data(), {E});
    moe_route_forward(ctx, Tensor(probs.data(), {N, E}), Tensor(idx.data(), {N, K}, DType::i32),
                      Tensor(w.data(), {N, K}), Tensor(logits.data(), {N, E}), b, sigmoid, true);
    moe_plan(ctx, Tensor(slot_src.data(), {N * K}, DType::i32),
             Tensor(assign_slot.data(), {N * K}, DType::i32), Tensor(load.data(), {E}, DType::i32),
             Tensor(kept.data(), {E}, DType::i32), Tensor(idx.data(), {N, K}, DType::i32),
             capacity);
  }
};

}  // namespace

TEST_CASE("moe routing: top-k of the scores, renormalised weights", "[cpu][moe]") {
  for (bool sigmoid : {false, true}) {
    Routed r(50, 7, 3, 1, {}, sigmoid);
    for (int64_t n = 0; n < r.N; ++n) {
      // Expected: the K largest scores computed here from the logits.
      std::vector<double> p(r.E);
      double m = *std::max_element(&r.logits[n * r.E], &r.logits[n * r.E] + r.E), z = 0;
      for (int64_t e = 0; e < r.E; ++e)
        z += p[e] = sigmoid ? 1.0 / (1.0 + std::exp(-double(r.logits[n * r.E + e])))
                            : std::exp(double(r.logits[n * r.E + e]) - m);
      if (!sigmoid)
        for (auto& x : p) x /= z;
      std::vector<int> order(r.E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
      double chosen = 0;
      for (int64_t k = 0; k < r.K; ++k) chosen += p[order[k]];
      double wsum = 0;
      for (int64_t k = 0; k < r.K; ++k) {
        CHECK(r.idx[n * r.K + k] == order[k]);
        CHECK(r.w[n * r.K + k] == Approx(p[order[k]] / chosen).epsilon(1e-5));
        wsum += r.w[n * r.K + k];
      }
      CHECK(wsum == Approx(1.0).epsilon(1e-6));
      for (int64_t e = 0; e < r.E; ++e) CHECK(r.probs[n * r.E + e] == Approx(p[e]).epsilon(1e-5));
    }
  }
}

TEST_CASE("moe routing: every token lands exactly top_k times, grouped by expert",
          "[cpu][moe]") {
  Routed r(64, 8, 2, 2);
  std::vector<int> seen(r.N * r.K, 0);
  int64_t s = 0;
  for (int64_t e = 0; e < r.E; ++e) {
    CHECK(r.kept[e] == r.load[e]);
    int64_t prev_token = -1;
    for (int64_t i = 0; i < r.kept[e]; ++i, ++s) {
      const int32_t a = r.slot_src[s];
      REQUIRE(a >= 0);
      CHECK(r.idx[a] == e);                // the slot is in its expert's block
      CHECK(a / r.K > prev_token);         // token order within the block
      prev_token = a / r.K;
      CHECK(r.assign_slot[a] == s);
      ++seen[a];
    }
  }
  CHECK(s == r.N * r.K);
  for (int64_t a = 0; a < r.N * r.K; ++a) CHECK(seen[a] == 1);
  for (int64_t n = 0; n < r.N; ++n) {
    std::vector<int32_t> e(r.idx.begin() + n * r.K, r.idx.begin() + (n + 1) * r.K);
    std::sort(e.begin(), e.end());
    CHECK(std::adjacent_find(e.begin(), e.end()) == e.end());  // distinct experts
  }
}

TEST_CASE("moe routing: combine inverts dispatch with identity experts", "[cpu][moe]") {
  Context ctx;
  Routed r(40, 6, 2, 3);
  const int64_t C = 5, N = r.N, S = r.N * r.K;
  std::vector<float> x(N * C), xs(S * C), y(N * C, 0.0f);
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  moe_gather(ctx, Tensor(xs.data(), {S, C}), Tensor(x.data(), {N, C}),
             Tensor(r.slot_src.data(), {S}, DType::i32), r.K);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < C; ++c) CHECK(xs[s * C + c] == x[(r.slot_src[s] / r.K) * C + c]);
  moe_combine(ctx, Tensor(y.data(), {N, C}), Tensor(xs.data(), {S, C}),
              Tensor(r.assign_slot.data(), {S}, DType::i32), Tensor(r.w.data(), {N, r.K}));
  for (int64_t i = 0; i < N * C; ++i) CHECK(y[i] == Approx(x[i]).epsilon(1e-6).margin(1e-6));
  // Gathering's backward sums each token's K slots back: K times the input.
  std::vector<float> dx(N * C, 0.0f);
  moe_gather_backward(ctx, Tensor(dx.data(), {N, C}), Tensor(xs.data(), {S, C}),
                      Tensor(r.assign_slot.data(), {S}, DType::i32));
  for (int64_t i = 0; i < N * C; ++i) CHECK(dx[i] == Approx(r.K * x[i]).epsilon(1e-6));
}

TEST_CASE("moe routing: the selection bias selects but does not weight", "[cpu][moe]") {
  std::vector<float> bias(6, 0.0f);
  bias[4] = 10.0f;  // beats any score difference
  Routed plain(30, 6, 2, 5), biased(30, 6, 2, 5, bias);
  for (int64_t n = 0; n < plain.N; ++n) {
    CHECK(biased.idx[n * 2] == 4);
    const int32_t other = biased.idx[n * 2 + 1];
    // The other choice is the best unbiased score among the rest.
    int32_t best = -1;
    for (int32_t e = 0; e < 6; ++e)
      if (e != 4 && (best < 0 || plain.probs[n * 6 + e] > plain.probs[n * 6 + best])) best = e;
    CHECK(other == best);
    const double p4 = plain.probs[n * 6 + 4], po = plain.probs[n * 6 + other];
    CHECK(biased.w[n * 2] == Approx(p4 / (p4 + po)).epsilon(1e-5));
  }
}

TEST_CASE("moe routing: capacity keeps each expert's first tokens and counts the rest",
          "[cpu][moe]") {
  const int64_t cap = 5;
  Routed all(48, 4, 2, 6), r(48, 4, 2, 6, {}, false, cap);
  int64_t dropped = 0;
  for (int64_t e = 0; e < r.E; ++e) {
    CHECK(r.load[e] == all.load[e]);
    CHECK(r.kept[e] == std::min<int64_t>(all.load[e], cap));
    dropped += r.load[e] - r.kept[e];
  }
  REQUIRE(dropped > 0);  // 96 assignments, at most 20 slots
  std::vector<int64_t> seen(r.E, 0);
  int64_t n_dropped = 0, kept_total = 0;
  for (int64_t a = 0; a < r.N * r.K; ++a) {
    const int32_t e = r.idx[a];
    if (seen[e]++ < cap) {
      CHECK(r.assign_slot[a] >= 0);
      ++kept_total;
    } else {
      CHECK(r.assign_slot[a] == -1);
      ++n_dropped;
    }
  }
  CHECK(n_dropped == dropped);
  for (int64_t s = kept_total; s < r.N * r.K; ++s) CHECK(r.slot_src[s] == -1);
}

TEST_CASE("moe routing: capacity over token blocks with `taken` keeps what the whole plan keeps",
          "[cpu][moe]") {
  // Sequence parallelism: tp rank r plans its block of tokens after ranks < r
  // used `taken[e]` of expert e's slots; the kept assignments must be exactly
  // those of one plan over all tokens.
  const int64_t N = 48, E = 4, K = 2, cap = 9, blocks = 3, Nb = N / blocks;
  Routed whole(N, E, K, 11, {}, false, cap);
  Context ctx;
  std::vector<int32_t> taken(E, 0);
  int64_t dropped = 0;
  for (int64_t q = 0; q < blocks; ++q) {
    std::vector<int32_t> idx(whole.idx.begin() + q * Nb * K, whole.idx.begin() + (q + 1) * Nb * K);
    std::vector<int32_t> src(Nb * K), slot(Nb * K), load(E), kept(E);
    moe_plan(ctx, Tensor(src.data(), {Nb * K}, DType::i32), Tensor(slot.data(), {Nb * K}, DType::i32),
             Tensor(load.data(), {E}, DType::i32), Tensor(kept.data(), {E}, DType::i32),
             Tensor(idx.data(), {Nb, K}, DType::i32), cap, Tensor(taken.data(), {E}, DType::i32));
    for (int64_t a = 0; a < Nb * K; ++a)
      CHECK((slot[a] >= 0) == (whole.assign_slot[q * Nb * K + a] >= 0));
    for (int64_t e = 0; e < E; ++e) {
      dropped += load[e] - kept[e];
      taken[e] += load[e];
    }
  }
  int64_t whole_dropped = 0;
  for (int64_t e = 0; e < E; ++e) whole_dropped += whole.load[e] - whole.kept[e];
  REQUIRE(whole_dropped > 0);
  CHECK(dropped == whole_dropped);
}

TEST_CASE("moe routing: group-limited top-k takes the best groups' experts only", "[cpu][moe]") {
  Context ctx;
  {  // Keys [0.3, 0.3, 0.5, 0.0] in groups {0, 1} {2, 3}: group 0 sums 0.6 to group
     // 1's 0.5, so the top-1 expert is 0 (tied with 1: the lower), not the best key 2.
    std::vector<float> logits(4, 0.0f), probs(4), w(1), bias = {0.05f, 0.05f, 0.25f, -0.25f};
    std::vector<int32_t> idx(1);
    moe_route_forward(ctx, Tensor(probs.data(), {1, 4}), Tensor(idx.data(), {1, 1}, DType::i32),
                      Tensor(w.data(), {1, 1}), Tensor(logits.data(), {1, 4}),
                      Tensor(bias.data(), {4}), false, true, {2, 1});
    CHECK(idx[0] == 0);
    CHECK(w[0] == 1.0f);
    moe_route_forward(ctx, Tensor(probs.data(), {1, 4}), Tensor(idx.data(), {1, 1}, DType::i32),
                      Tensor(w.data(), {1, 1}), Tensor(logits.data(), {1, 4}),
                      Tensor(bias.data(), {4}), false, true);
    CHECK(idx[0] == 2);  // ungrouped
  }
  // Against a reference written with sorts: groups by their two best keys, then
  // the top-k keys among their experts (stable: ties to the lower index).
  struct Case {
    int64_t E, G, top, K;
  };
  for (const Case c : {Case{8, 4, 2, 3}, Case{16, 4, 1, 4}, Case{12, 3, 2, 2}, Case{64, 8, 4, 8}})
    for (bool sigmoid : {false, true})
      for (bool with_bias : {false, true}) {
        INFO("E=" << c.E << " G=" << c.G << " top=" << c.top << " K=" << c.K << " sigmoid=" << sigmoid
                  << " bias=" << with_bias);
        const int64_t N = 97, E = c.E, K = c.K, size = E / c.G;
        std::mt19937 rng(static_cast<uint32_t>(E * 10 + c.G + sigmoid * 3 + with_bias));
        std::normal_distribution<float> nd(0.0f, 2.0f);
        std::vector<float> logits(N * E), probs(N * E), w(N * K), bias(E);
        for (float& x : logits) x = std::round(nd(rng) * 4.0f) / 4.0f;  // ties too
        for (float& x : bias) x = std::round(nd(rng) * 8.0f) / 64.0f;
        std::vector<int32_t> idx(N * K);
        moe_route_forward(ctx, Tensor(probs.data(), {N, E}), Tensor(idx.data(), {N, K}, DType::i32),
                          Tensor(w.data(), {N, K}), Tensor(logits.data(), {N, E}),
                          with_bias ? Tensor(bias.data(), {E}) : Tensor{}, sigmoid, true,
                          {c.G, c.top});
        int bad = 0;
        for (int64_t n = 0; n < N; ++n) {
          std::vector<float> key(E);
          for (int64_t e = 0; e < E; ++e) key[e] = probs[n * E + e] + (with_bias ? bias[e] : 0.0f);
          std::vector<float> gscore(c.G);
          for (int64_t g = 0; g < c.G; ++g) {
            std::vector<float> v(key.begin() + g * size, key.begin() + (g + 1) * size);
            std::sort(v.begin(), v.end(), std::greater<>());
            gscore[g] = v[0] + v[1];
          }
          std::vector<int64_t> gorder(c.G);
          std::iota(gorder.begin(), gorder.end(), 0);
          std::stable_sort(gorder.begin(), gorder.end(),
                           [&](int64_t a, int64_t b) { return gscore[a] > gscore[b]; });
          std::vector<int64_t> allowed;
          for (int64_t j = 0; j < c.top; ++j)
            for (int64_t e = gorder[j] * size; e < (gorder[j] + 1) * size; ++e) allowed.push_back(e);
          std::sort(allowed.begin(), allowed.end());
          std::stable_sort(allowed.begin(), allowed.end(),
                           [&](int64_t a, int64_t b) { return key[a] > key[b]; });
          for (int64_t k = 0; k < K; ++k) bad += idx[n * K + k] != allowed[k];
        }
        CHECK(bad == 0);
      }
  std::vector<float> logits(8), probs(8), w(3);
  std::vector<int32_t> idx(3);
  CHECK_THROWS_AS(moe_route_forward(ctx, Tensor(probs.data(), {1, 8}),
                                    Tensor(idx.data(), {1, 3}, DType::i32), Tensor(w.data(), {1, 3}),
                                    Tensor(logits.data(), {1, 8}), {}, false, true, {4, 1}),
                  Error);  // 3 experts from one group of 2
}
