// The sequence-wise balance loss ops (kernels/moe_seq_aux.h) on the CPU backend
// against a reference written here in long double (top-k by sorting, scores
// and their normalisation), its gradient against central differences of that
// reference in double, a balanced router's loss of 1, rows split over two
// "ranks" summing to the whole, and the refused row tables.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/moe_seq_aux.h"
#include "kernels/op_scratch.h"

using namespace trainer;

namespace {

struct Seq {
  int64_t first, rows;
};

// The loss of the definition, in long double, from double logits (N, E).
long double reference_loss(const std::vector<double>& l, int64_t E, int64_t K, bool sigmoid,
                           const std::vector<Seq>& seqs, int64_t T) {
  long double total = 0;
  for (const Seq& s : seqs) {
    std::vector<long double> count(E, 0), score(E, 0);
    for (int64_t n = s.first; n < s.first + s.rows; ++n) {
      std::vector<int64_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return l[n * E + a] > l[n * E + b]; });
      for (int64_t k = 0; k < K; ++k) count[order[k]] += 1;
      std::vector<long double> sc(E);
      long double sum = 0;
      for (int64_t e = 0; e < E; ++e) {
        const long double x = l[n * E + e];
        sc[e] = sigmoid ? 1.0L / (1.0L + std::exp(-x)) : std::exp(x);
        sum += sc[e];
      }
      for (int64_t e = 0; e < E; ++e) score[e] += sc[e] / sum;
    }
    long double seq = 0;
    for (int64_t e = 0; e < E; ++e)
      seq += (static_cast<long double>(E) / (K * T)) * count[e] * (score[e] / T);
    total += seq;
  }
  return total / static_cast<long double>(seqs.size());
}

std::vector<int32_t> table(const std::vector<Seq>& seqs) {
  std::vector<int32_t> t;
  for (const Seq& s : seqs) {
    t.push_back(static_cast<int32_t>(s.first));
    t.push_back(static_cast<int32_t>(s.rows));
  }
  return t;
}

}  // namespace

TEST_CASE("moe seq aux loss: sums, loss and gradient against the definition", "[cpu][moe]") {
  for (bool sigmoid : {false, true})
    for (int64_t E : {2, 5, 16})
      for (int64_t K : {int64_t{1}, E / 2 + 1}) {
        INFO("sigmoid " << sigmoid << " E " << E << " K " << K);
        // Three sequences of T = 7 tokens; this "rank" holds all of the first,
        // the start of the second, none of the third: the loss still averages
        // over 3 (the other ranks' sums would be added before it).
        const int64_t T = 7, N = 10;
        const std::vector<Seq> seqs{{0, 7}, {7, 3}, {0, 0}};
        std::mt19937 rng(static_cast<uint32_t>(E * 10 + K + sigmoid));
        std::normal_distribution<float> nd(0.0f, 1.5f);
        std::vector<float> logits(N * E);
        for (float& x : logits) x = nd(rng);
        // A tie across the K boundary: the lower index wins it.
        logits[2 * E + 1] = logits[2 * E + 0];
        const std::vector<int32_t> rows = table(seqs);
        Context ctx;
        const Tensor lt(logits.data(), {N, E}), rt(const_cast<int32_t*>(rows.data()), {3, 2}, DType::i32);
        std::vector<double> sums(3 * 2 * E, -5.0);
        const Tensor st(sums.data(), {3, 2 * E}, DType::f64);
        moe_seq_aux_sums(ctx, st, lt, rt, 7, K, sigmoid);
        // Counts: each token picks K experts; the empty sequence is zeros.
        for (int64_t b = 0; b < 3; ++b) {
          double c = 0;
          for (int64_t e = 0; e < E; ++e) c += sums[b * 2 * E + e];
          CHECK(c == double(seqs[b].rows * K));
        }
        std::vector<double> ld(logits.begin(), logits.end());
        float loss = -1, aux = 0.5f;
        moe_seq_aux_loss(ctx, Tensor(&loss, {1}), Tensor(&aux, {1}), st, T, K, 0.25f);
        const long double ref = reference_loss(ld, E, K, sigmoid, seqs, T);
        CHECK(loss == Approx(static_cast<double>(ref)).epsilon(1e-6));
        CHECK(aux == Approx(0.5 + 0.25 * loss).epsilon(1e-7));
        float again = -1;
        moe_seq_aux_loss(ctx, Tensor(&again, {1}), {}, st, T, K, 0.25f);
        CHECK(again == loss);

        // Gradient of scale * loss, added to what dlogits held.
        const float scale = 3.0f;
        std::vector<float> dl(N * E, 0.125f);
        moe_seq_aux_backward(ctx, Tensor(dl.data(), {N, E}), lt, rt, st, T, K, scale, sigmoid);
        int checked = 0;
        for (int64_t i = 0; i < N * E; ++i) {
          if (i == 2 * E || i == 2 * E + 1) continue;  // the tie: a step either way moves a pick
          const double h = 1e-6;
          std::vector<double> up = ld, down = ld;
          up[i] += h, down[i] -= h;
          const double numeric = scale *
                                 static_cast<double>(reference_loss(up, E, K, sigmoid, seqs, T) -
                                                     reference_loss(down, E, K, sigmoid, seqs, T)) /
                                 (2 * h);
          INFO("logit " << i << " analytic " << dl[i] - 0.125f << " numeric " << numeric);
          CHECK(double(dl[i]) - 0.125 == Approx(numeric).margin(2e-7).epsilon(1e-4));
          ++checked;
        }
        CHECK(checked == N * E - 2);
      }
}

TEST_CASE("moe seq aux loss: 1 when every sequence is balanced, E/K for one expert's", "[cpu][moe]") {
  // E = 4, K = 2, two sequences of 4 tokens: token t picks experts {t, t+1} mod 4
  // with equal logits elsewhere tied below, so each expert gets 2 of 8 picks.
  const int64_t E = 4, K = 2, T = 4;
  std::vector<float> logits(2 * T * E, 0.0f);
  for (int64_t n = 0; n < 2 * T; ++n) {
    logits[n * E + n % E] = 1.0f;
    logits[n * E + (n + 1) % E] = 1.0f;
  }
  const std::vector<int32_t> rows{0, 4, 4, 4};
  Context ctx;
  std::vector<double> sums(2 * 2 * E);
  const Tensor st(sums.data(), {2, 2 * E}, DType::f64);
  const Tensor rt(const_cast<int32_t*>(rows.data()), {2, 2}, DType::i32);
  float loss = 0;
  // Softmax: every expert's mean score is 1/4 by symmetry, counts T K / E: loss 1.
  moe_seq_aux_sums(ctx, st, Tensor(logits.data(), {2 * T, E}), rt, T, K, false);
  moe_seq_aux_loss(ctx, Tensor(&loss, {1}), {}, st, T, K, 1.0f);
  CHECK(loss == Approx(1.0).epsilon(1e-6));
  // Every token of both sequences sends everything to experts 0 and 1, with
  // (almost) all score: f = (E/K) on them, P = 1/2: loss = 2 * (E/K) * 1/2 = E/K.
  for (int64_t n = 0; n < 2 * T; ++n) {
    for (int64_t e = 0; e < E; ++e) logits[n * E + e] = e < 2 ? 40.0f : -40.0f;
  }
  moe_seq_aux_sums(ctx, st, Tensor(logits.data(), {2 * T, E}), rt, T, K, false);
  moe_seq_aux_loss(ctx, Tensor(&loss, {1}), {}, st, T, K, 1.0f);
  CHECK(loss == Approx(double(E) / K).epsilon(1e-6));
  // All logits equal: ties go to the lower indices, experts 0 and 1.
  std::fill(logits.begin(), logits.end(), 0.5f);
  moe_seq_aux_sums(ctx, st, Tensor(logits.data(), {2 * T, E}), rt, T, K, true);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t e = 0; e < E; ++e) CHECK(sums[b * 2 * E + e] == (e < K ? double(T) : 0.0));
}

TEST_CASE("moe seq aux loss: a sequence split over ranks sums to the whole", "[cpu][moe]") {
  // Two "ranks" hold rows [0, 5) and [5, 9) of one sequence of 9; their sums
  // added equal one rank's over all 9 (the model all-reduces them so).
  const int64_t E = 6, K = 2, N = 9;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> logits(N * E);
  for (float& x : logits) x = nd(rng);
  Context ctx;
  auto sums_of = [&](int64_t first, int64_t rows) {
    std::vector<double> s(2 * E);
    std::vector<int32_t> t{0, static_cast<int32_t>(rows)};
    moe_seq_aux_sums(ctx, Tensor(s.data(), {1, 2 * E}, DType::f64),
                     Tensor(logits.data() + first * E, {rows, E}), Tensor(t.data(), {1, 2}, DType::i32),
                     rows, K, true);
    return s;
  };
  const std::vector<double> whole = sums_of(0, N), a = sums_of(0, 5), b = sums_of(5, 4);
  for (int64_t i = 0; i < 2 * E; ++i) CHECK(a[i] + b[i] == Approx(whole[i]).epsilon(1e-14));
}

TEST_CASE("moe seq aux loss: row tables outside the rows or overlapping are refused", "[cpu][moe]") {
  const int64_t E = 3, N = 4;
  std::vector<float> logits(N * E, 0.0f);
  std::vector<double> sums(2 * 2 * E);
  Context ctx;
  for (std::vector<int32_t> bad : {std::vector<int32_t>{0, 3, 2, 2}, std::vector<int32_t>{0, 2, 3, 2},
                                   std::vector<int32_t>{-1, 2, 2, 2}, std::vector<int32_t>{0, -1, 2, 2}}) {
    INFO(bad[0] << " " << bad[1] << " " << bad[2] << " " << bad[3]);
    const Tensor rt(bad.data(), {2, 2}, DType::i32);
    CHECK_THROWS_AS(moe_seq_aux_sums(ctx, Tensor(sums.data(), {2, 2 * E}, DType::f64),
                                     Tensor(logits.data(), {N, E}), rt, 2, 1, false),
                    Error);
  }
  std::vector<int32_t> good{0, 2, 2, 2};
  CHECK_THROWS_AS(moe_seq_aux_sums(ctx, Tensor(sums.data(), {2, 2 * E}, DType::f64),
                                   Tensor(logits.data(), {N, E}),
                                   Tensor(good.data(), {2, 2}, DType::i32), 2, 4, false),
                  Error);  // top_k above E
  CHECK_THROWS_AS(moe_seq_aux_sums(ctx, Tensor(sums.data(), {2, 2 * E}, DType::f64),
                                   Tensor(logits.data(), {N, E}),
                                   Tensor(good.data(), {2, 2}, DType::i32), -1, 1, false),
                  Error);  // a negative max_rows
}

TEST_CASE("moe seq aux loss: the device scratch grows with the sequences, not their square",
          "[cpu][moe]") {
  // B sequences of T rows: the partials cover max_rows = T rows per sequence
  // (sizing them by all N = B T rows made them B^2 T), then one SeqAuxRow a row.
  const int64_t T = 4096, E = 256;
  auto partials = [&](int64_t B) {
    return moe_seq_aux_scratch_bytes(B * T, B, E, T) - B * T * sizeof(SeqAuxRow);
  };
  CHECK(partials(1) == size_t(T / kMoeSeqAuxChunkRows * 2 * E) * sizeof(double));
  CHECK(partials(8) == 8 * partials(1));
  CHECK(moe_seq_aux_chunks(0) == 1);
  CHECK(moe_seq_aux_chunks(kMoeSeqAuxChunkRows + 1) == 2);
}
