// Vocab-parallel cross-entropy: one rank, two simulated ranks, padding columns,
// ignored targets, in-place backward.
#include "kernels/cross_entropy.h"

#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

// losses (N) from full logits (N, V) in double; target < 0 gives 0.
std::vector<double> ref_losses(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                               int64_t V) {
  const int64_t N = targets.size();
  std::vector<double> loss(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    double m = -1e300, s = 0.0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, logits[n * V + j]);
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[n * V + j] - m);
    loss[n] = std::log(s) + m - logits[n * V + targets[n]];
  }
  return loss;
}

// Columns [vocab_start, vocab_start + Vp) of full (N, V) logits, padded past V with `pad`.
std::vector<float> shard(const std::vector<float>& full, int64_t N, int64_t V, int64_t vocab_start,
                         int64_t Vp, float pad) {
  std::vector<float> s(N * Vp);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < Vp; ++j)
      s[n * Vp + j] = vocab_start + j < V ? full[n * V + vocab_start + j] : pad;
  return s;
}

}  // namespace

TEST_CASE("cross entropy over vocab shards equals the full-vocab reference", "[cpu][cross_entropy]") {
  Context ctx;
  const int64_t N = 7, V = 37;
  std::vector<int32_t> targets = {0, 36, 5, -1, 20, 19, 36};
  auto full = random_floats(N * V, 201, -4.0f, 4.0f), dloss = random_floats(N, 202);
  full[2 * V + 7] = 30.0f;  // one dominant logit: the max shift matters
  const auto fulld = to_double(full), dlossd = to_double(dloss);
  const auto loss_ref = ref_losses(fulld, targets, V);
  auto grad_ref = finite_diff([&](const std::vector<double>& x) { return dot(dlossd, ref_losses(x, targets, V)); }, fulld);

  // ranks = 1: one padded shard; ranks = 2: two shards of 20 columns, the last 3 padding.
  for (int64_t ranks : {1, 2}) {
    INFO("ranks " << ranks);
    const int64_t Vp = ranks == 1 ? 40 : 20;
    std::vector<std::vector<float>> logits(ranks), maxv(ranks, std::vector<float>(N)),
        sumexp(ranks, std::vector<float>(N)), tlogit(ranks, std::vector<float>(N));
    for (int64_t r = 0; r < ranks; ++r) {
      logits[r] = shard(full, N, V, r * Vp, Vp, 1000.0f);  // padding would dominate if read
      cpu::cross_entropy_max(ctx, view(maxv[r], {N}), view(logits[r], {N, Vp}), r * Vp, V);
    }
    std::vector<float> gmax(N, -INFINITY), gsum(N, 0.0f), gtl(N, 0.0f);
    for (int64_t r = 0; r < ranks; ++r)
      for (int64_t n = 0; n < N; ++n) gmax[n] = std::max(gmax[n], maxv[r][n]);
    for (int64_t r = 0; r < ranks; ++r) {
      cpu::cross_entropy_sumexp(ctx, view(sumexp[r], {N}), view(tlogit[r], {N}), view(logits[r], {N, Vp}),
                                view(gmax, {N}), view(targets, {N}), r * Vp, V);
      for (int64_t n = 0; n < N; ++n) gsum[n] += sumexp[r][n], gtl[n] += tlogit[r][n];
    }
    std::vector<float> losses(N, 5.0f);
    cpu::cross_entropy_loss(ctx, view(losses, {N}), view(gmax, {N}), view(gsum, {N}), view(gtl, {N}),
                            view(targets, {N}));
    require_close(losses, loss_ref, 1e-5, 1e-6, "losses");
    CHECK(losses[3] == 0.0f);

    for (int64_t r = 0; r < ranks; ++r) {
      // In place: dlogits aliases the logits buffer, as the model reuses it.
      cpu::cross_entropy_backward(ctx, view(logits[r], {N, Vp}), view(logits[r], {N, Vp}), view(gmax, {N}),
                                  view(gsum, {N}), view(targets, {N}), view(dloss, {N}), r * Vp, V);
      std::vector<double> want(N * Vp, 0.0);  // padding columns and ignored rows: 0
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < Vp && r * Vp + j < V; ++j) want[n * Vp + j] = grad_ref[n * V + r * Vp + j];
      require_close(logits[r], want, 1e-4, 1e-5, "dlogits");
      for (int64_t j = 0; j < Vp; ++j) REQUIRE(logits[r][3 * Vp + j] == 0.0f);
    }
  }
}

TEST_CASE("cross entropy refuses a target outside the vocabulary", "[cpu][cross_entropy]") {
  Context ctx;
  const int64_t N = 2, V = 4;
  std::vector<float> logits(N * V), maxv(N, 0.0f), sumexp(N), tl(N);
  std::vector<int32_t> targets = {1, 4};
  CHECK_THROWS_AS(cpu::cross_entropy_sumexp(ctx, view(sumexp, {N}), view(tl, {N}), view(logits, {N, V}),
                                            view(maxv, {N}), view(targets, {N}), 0, V), Error);
}
