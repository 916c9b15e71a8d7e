// The MoE layer: its whole gradient (router through the combine weights, the
// balance loss and z-loss, routed and shared experts, the input) against
// central finite differences of the layer itself; capacity dropping in the
// step stats; aux-loss-free balancing; determinism; the expert rows planned
// for dropless expert parallelism.
#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "moe_harness.h"

using namespace trainer;
using namespace trainer::model;
using trainer::test::MoeHarness;

namespace {

// Sets the OpenMP thread count for a scope (restored even when a REQUIRE throws).
struct OmpThreads {
  int saved = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved); }
};

Tensor buffer_named(const Buffers& b, const std::string& suffix) {
  for (size_t i = 0; i < b.buffers().size(); ++i) {
    const std::string& n = b.buffers()[i].name;
    if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      return b.get(static_cast<BufferId>(i));
  }
  FAIL("no buffer " << suffix);
  return {};
}

std::vector<int32_t> routing(const Buffers& b) {
  std::vector<int32_t> r;
  for (const char* name : {"topk_idx", "assign_slot"}) {
    Tensor t = buffer_named(b, name);
    r.insert(r.end(), t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }
  return r;
}

// Checks every parameter and input element. The layer is float, so the
// difference quotient of eps = 1e-2 carries about 1e-4 of rounding and
// truncation error: tolerance 2e-3 + 2e-2 |numeric|. Coordinates whose
// perturbation changes the routing (top-k is piecewise) are skipped.
// One thread: ~1600 tiny forwards are all OpenMP barriers otherwise on a busy
// machine; the determinism test shows 1 and 2 threads agree bit for bit.
void gradcheck(Family family, MoeConfig mc, bool aux_only, int64_t sequences = 1) {
  OmpThreads one(1);
  MoeHarness h(family, mc, 6, 8, 21, sequences);
  if (aux_only) std::fill(h.dout.begin(), h.dout.end(), 0.0f);
  if (mc.balance == MoeBalance::aux_free) {
    Tensor bias = h.buf.param(h.moe.selection_bias());
    for (int64_t e = 0; e < bias.numel(); ++e) bias.ptr<float>()[e] = 0.03f * float(e % 3);
  }
  h.zero_grads();
  h.forward();
  const std::vector<int32_t> base = routing(h.buf);
  if (mc.capacity_factor > 0) REQUIRE(h.moe.stats(h.buf).dropped > 0);  // the drop path is checked
  h.backward();

  int checked = 0, skipped = 0;
  auto check = [&](float* x, float analytic, const std::string& what) {
    const float orig = *x;
    const float eps = 1e-2f;
    *x = orig + eps;
    const double up = h.objective();
    const bool same_up = routing(h.buf) == base;
    *x = orig - eps;
    const double down = h.objective();
    const bool same_down = routing(h.buf) == base;
    *x = orig;
    if (!same_up || !same_down) {
      ++skipped;
      return;
    }
    const double numeric = (up - down) / (2.0 * eps);
    INFO(what << " analytic " << analytic << " numeric " << numeric);
    CHECK(std::fabs(analytic - numeric) <= 2e-3 + 2e-2 * std::fabs(numeric));
    ++checked;
  };
  double router_grad = 0;
  for (const auto& p : h.buf.params()) {
    Tensor w = h.buf.get(p.value), g = h.buf.get(p.grad);
    for (int64_t i = 0; i < w.numel(); ++i) {
      if (p.spec.name.find("gate.weight") != std::string::npos)
        router_grad += std::fabs(g.ptr<float>()[i]);
      check(w.ptr<float>() + i, g.ptr<float>()[i], p.spec.name + "[" + std::to_string(i) + "]");
    }
  }
  for (int64_t i = 0; i < h.N * h.C; ++i)
    check(&h.in[i], h.dinp[i], "input[" + std::to_string(i) + "]");
  INFO("checked " << checked << " skipped " << skipped);
  CHECK(skipped * 10 < checked);
  CHECK(router_grad > 1e-2);  // the router gradient is exercised, not vacuously zero
}

}  // namespace

TEST_CASE("moe layer gradient: SwiGLU experts, softmax, shared expert, balance + z-loss",
          "[cpu][moe]") {
  MoeConfig mc{.n_experts = 4, .top_k = 2, .n_shared_experts = 1, .d_ff_expert = 6,
               .balance = MoeBalance::aux_loss, .aux_loss_coeff = 0.5f, .z_loss_coeff = 0.05f};
  SECTION("output and aux") { gradcheck(Family::llama, mc, false); }
  SECTION("aux losses only") { gradcheck(Family::llama, mc, true); }
}

// Sigmoid scores under group-limited routing: the balance loss's counts are
// group-free, so they can differ from the routing the experts ran.
TEST_CASE("moe layer gradient: sigmoid, groups, balance loss", "[cpu][moe]") {
  MoeConfig mc{.n_experts = 8, .top_k = 2, .d_ff_expert = 6, .balance = MoeBalance::aux_loss,
               .aux_loss_coeff = 0.5f, .z_loss_coeff = 0.05f, .sigmoid = true, .n_groups = 4,
               .top_groups = 2};
  SECTION("output and aux") { gradcheck(Family::llama, mc, false); }
  SECTION("aux losses only") { gradcheck(Family::llama, mc, true); }
}

TEST_CASE("moe layer gradient: GELU experts, sigmoid, capacity dropping", "[cpu][moe]") {
  MoeConfig mc{.n_experts = 4, .top_k = 2, .d_ff_expert = 6, .balance = MoeBalance::aux_loss,
               .aux_loss_coeff = 0.5f, .capacity_factor = 1.0f, .sigmoid = true};
  SECTION("output and aux") { gradcheck(Family::gpt2, mc, false); }
  SECTION("aux losses only") { gradcheck(Family::gpt2, mc, true); }
}

// DeepSeek-V3's routed_scaling_factor: the combine weights (and so the
// router's gradient) times 2.5, with sigmoid scores and aux_free's bias.
TEST_CASE("moe layer gradient: sigmoid top-2 renormalised, weights scaled by 2.5", "[cpu][moe]") {
  MoeConfig mc{.n_experts = 4, .top_k = 2, .d_ff_expert = 6, .balance = MoeBalance::aux_free,
               .sigmoid = true, .topk_scaling = 2.5f};
  gradcheck(Family::llama, mc, false);
}

// DeepSeek-V3's balancing: the aux_free bias plus the sequence-wise loss, over
// two sequences of 3 tokens (each with its own counts); and with softmax
// scores beside the batch-wise balance loss.
TEST_CASE("moe layer gradient: sequence-wise balance loss", "[cpu][moe]") {
  MoeConfig deepseek{.n_experts = 4, .top_k = 2, .d_ff_expert = 6, .balance = MoeBalance::aux_free,
                     .seq_aux_loss_coeff = 0.7f, .sigmoid = true, .topk_scaling = 2.5f};
  SECTION("sigmoid, output and aux") { gradcheck(Family::llama, deepseek, false, 2); }
  SECTION("sigmoid, aux only") { gradcheck(Family::llama, deepseek, true, 2); }
  MoeConfig softmax{.n_experts = 4, .top_k = 2, .n_shared_experts = 1, .d_ff_expert = 6,
                    .balance = MoeBalance::aux_loss, .aux_loss_coeff = 0.3f,
                    .seq_aux_loss_coeff = 0.7f};
  SECTION("softmax, aux only") { gradcheck(Family::gpt2, softmax, true, 2); }
}

// Qwen3-MoE's norm_topk_prob: false (Megatron's pre-softmax router).
TEST_CASE("moe layer gradient: SwiGLU experts, softmax top-2 not renormalised", "[cpu][moe]") {
  MoeConfig mc{.n_experts = 4, .top_k = 2, .d_ff_expert = 6, .balance = MoeBalance::aux_loss,
               .aux_loss_coeff = 0.5f, .normalize_topk = false};
  SECTION("output and aux") { gradcheck(Family::llama, mc, false); }
  SECTION("aux losses only") { gradcheck(Family::llama, mc, true); }
}

// Qwen2-MoE's gated shared expert: its output x sigmoid(x . w), w read in fp32
// with the router's input (whose gradient it joins).
TEST_CASE("moe layer gradient: SwiGLU experts, gated shared expert", "[cpu][moe]") {
  MoeConfig mc{.n_experts = 4, .top_k = 2, .n_shared_experts = 1, .shared_gate = true,
               .d_ff_expert = 6, .balance = MoeBalance::aux_loss, .aux_loss_coeff = 0.5f,
               .normalize_topk = false};
  gradcheck(Family::llama, mc, false);
}

TEST_CASE("moe layer gradient: GELU experts, aux-free bias, two shared experts, top-1",
          "[cpu][moe]") {
  MoeConfig mc{.n_experts = 3, .top_k = 1, .n_shared_experts = 2, .d_ff_expert = 5,
               .balance = MoeBalance::aux_free, .normalize_topk = false};
  gradcheck(Family::gpt2, mc, false);
}

TEST_CASE("moe layer: balance loss is 1 when perfectly balanced and grows with skew",
          "[cpu][moe]") {
  MoeConfig mc{.n_experts = 4, .top_k = 1, .d_ff_expert = 4, .aux_loss_coeff = 1.0f};
  MoeHarness h(Family::gpt2, mc, 8, 4, 3);
  // Router weight 0: uniform probabilities, ties to expert 0: every token there.
  // E/(N K) * sum_e load_e * P_e = 4/8 * 8 * 1/4 = 1 regardless of the skew
  // of the load when P is uniform.
  Tensor router = h.buf.param(ParamId{0});
  std::fill(router.ptr<float>(), router.ptr<float>() + router.numel(), 0.0f);
  h.forward();
  CHECK(h.moe.aux_loss(h.buf) == Approx(1.0));
  // All probability and all load on expert 0: E * 1 * 1 = 4.
  for (int64_t c = 0; c < 4; ++c) router.ptr<float>()[c] = 0.0f;
  for (int64_t i = 0; i < h.N * h.C; ++i) h.in[i] = 1.0f;
  router.ptr<float>()[0] = 50.0f;
  h.forward();
  CHECK(h.moe.aux_loss(h.buf) == Approx(4.0).epsilon(1e-4));
}

TEST_CASE("moe layer: capacity drops are counted and dropped tokens get no expert output",
          "[cpu][moe]") {
  MoeConfig mc{.n_experts = 4, .top_k = 1, .d_ff_expert = 4, .balance = MoeBalance::none,
               .capacity_factor = 1.0f};
  MoeHarness h(Family::llama, mc, 16, 4, 5);
  // Skew: expert 0's router row aligned with a shared input component.
  Tensor router = h.buf.param(ParamId{0});
  for (int64_t c = 0; c < 4; ++c) router.ptr<float>()[c] = 3.0f;
  for (int64_t i = 0; i < h.N * h.C; ++i) h.in[i] = 0.1f * h.in[i] + 1.0f;
  h.forward();
  const MoeStats s = h.moe.stats(h.buf);
  Tensor idx = buffer_named(h.buf, "topk_idx");
  std::vector<int64_t> load(4, 0);
  for (int64_t n = 0; n < h.N; ++n) ++load[idx.ptr<int32_t>()[n]];
  int64_t dropped = 0;
  for (int64_t e = 0; e < 4; ++e) dropped += std::max<int64_t>(0, load[e] - 4);  // capacity 16/4
  REQUIRE(load[0] > 4);
  CHECK(s.dropped == dropped);
  CHECK(s.assignments == 16);
  CHECK(s.imbalance == Approx(double(*std::max_element(load.begin(), load.end())) / 4.0));
  std::vector<int64_t> seen(4, 0);
  for (int64_t n = 0; n < h.N; ++n) {
    const bool kept = seen[idx.ptr<int32_t>()[n]]++ < 4;
    double norm = 0;
    for (int64_t c = 0; c < h.C; ++c) norm += std::fabs(h.out[n * h.C + c]);
    if (kept)
      CHECK(norm > 0);
    else
      CHECK(norm == 0);
  }
}

TEST_CASE("moe layer: aux-free bias updates lower the imbalance of a skewed input",
          "[cpu][moe]") {
  MoeConfig mc{.n_experts = 8, .top_k = 2, .d_ff_expert = 4, .balance = MoeBalance::aux_free};
  MoeHarness h(Family::llama, mc, 64, 8, 9);
  Tensor router = h.buf.param(ParamId{0});
  for (int64_t c = 0; c < 8; ++c) router.ptr<float>()[c] += 0.3f;      // expert 0
  for (int64_t c = 0; c < 8; ++c) router.ptr<float>()[8 + c] += 0.2f;  // expert 1
  for (int64_t i = 0; i < h.N * h.C; ++i) h.in[i] = 0.5f * h.in[i] + 1.0f;
  std::vector<double> imbalance;
  for (int step = 0; step < 40; ++step) {
    h.moe.reset_step_stats(h.ctx, h.buf);
    h.forward();
    imbalance.push_back(h.moe.stats(h.buf).imbalance);
    h.moe.update_bias(h.ctx, h.buf, 0.01f, Tensor(h.moe.step_counts(h.buf).data, {8}));
  }
  for (double x : imbalance) UNSCOPED_INFO(x);
  // A fixed-rate sign update ends oscillating around balance (near-identical
  // tokens move together), so the check is on the mean of the last updates.
  CHECK(imbalance.front() > 3.0);
  double tail = 0;
  for (size_t i = imbalance.size() - 10; i < imbalance.size(); ++i) tail += imbalance[i] / 10;
  CHECK(tail < 0.7 * imbalance.front());
  CHECK(*std::max_element(imbalance.begin() + 10, imbalance.end()) < imbalance.front());
  // Combine weights never see the bias: they still sum to 1 per token.
  Tensor w = buffer_named(h.buf, "topk_weight");
  for (int64_t n = 0; n < h.N; ++n)
    CHECK(w.ptr<float>()[2 * n] + w.ptr<float>()[2 * n + 1] == Approx(1.0f));
}

TEST_CASE("moe layer: forward and backward are bitwise deterministic across thread counts",
          "[cpu][moe]") {
  MoeConfig mc{.n_experts = 6, .top_k = 2, .n_shared_experts = 1, .d_ff_expert = 8,
               .aux_loss_coeff = 0.1f, .z_loss_coeff = 0.01f};
  auto run = [&](int threads) {
    OmpThreads scoped(threads);
    MoeHarness h(Family::llama, mc, 40, 16, 13);
    h.zero_grads();
    h.forward();
    h.backward();
    std::vector<float> all = h.out;
    all.insert(all.end(), h.dinp.begin(), h.dinp.end());
    for (const auto& p : h.buf.params()) {
      Tensor g = h.buf.get(p.grad);
      all.insert(all.end(), g.ptr<float>(), g.ptr<float>() + g.numel());
    }
    return all;
  };
  const std::vector<float> a = run(2), b = run(2), c = run(1);
  CHECK(a == b);
  CHECK(a == c);
}

TEST_CASE("moe plan size: dropless ep rows are ep_recv_headroom x the balanced load, up to the "
          "worst case",
          "[cpu][moe]") {
  // 64 tokens, top-2 of 16 experts over ep 8 (2 a rank): balanced S = 128
  // rows a rank, worst case 8 peers x 64 tokens x min(2, 2) = 1024.
  model::ModelConfig cfg;
  cfg.d_model = 16;
  model::MoeConfig mc;
  mc.n_experts = 16, mc.top_k = 2, mc.ep = 8;
  const model::BatchShape batch{2, 32};
  auto rows = [&](double headroom, float capacity_factor = 0.0f) {
    mc.ep_recv_headroom = headroom, mc.capacity_factor = capacity_factor;
    return model::moe_plan_size(cfg, mc, batch).rows;
  };
  CHECK(rows(2.0) == 256);
  CHECK(rows(3.5) == 448);
  CHECK(rows(1.01) == 130);  // ceil(129.28)
  CHECK(rows(8.0) == 1024);
  CHECK(rows(100.0) == 1024);
  // Capacity bounds the rows whatever the headroom: 8 peers x 2 experts x ceil(1.0 * 64 * 2 / 16).
  CHECK(rows(2.0, 1.0f) == 128);
  CHECK(rows(100.0, 1.0f) == 128);
  mc.ep = 1;
  CHECK(rows(2.0) == 128);  // no exchange: this rank's own assignments
}

// balance: aux_loss is Megatron's (compute_routing_scores_for_aux_loss): the
// counts are each token's top-k of the raw scores, whatever group limit the
// routing has, and P is the scores normalised to sum 1. A sigmoid router's
// raw scores do not sum to 1: averaged as they are, the loss would fall by
// pushing every logit down, balanced or not.
TEST_CASE("moe layer: the balance loss takes normalised scores and group-free counts",
          "[cpu][moe]") {
  for (bool sigmoid : {false, true}) {
    INFO("sigmoid " << sigmoid);
    MoeConfig mc{.n_experts = 8, .top_k = 2, .d_ff_expert = 6, .balance = MoeBalance::aux_loss,
                 .aux_loss_coeff = 0.5f, .sigmoid = sigmoid, .n_groups = 4, .top_groups = 1};
    MoeHarness h(Family::llama, mc, 24, 8, 5);
    h.forward();
    Tensor logits = buffer_named(h.buf, "router_logits");
    const int64_t N = h.N, E = mc.n_experts, K = mc.top_k;
    std::vector<double> count(E, 0), score(E, 0);
    int64_t outside_group = 0;  // picks the routing (one group of 2) could not make
    for (int64_t n = 0; n < N; ++n) {
      const float* l = logits.ptr<float>() + n * E;
      std::vector<int64_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return l[a] > l[b]; });
      for (int64_t k = 0; k < K; ++k) count[order[k]] += 1;
      outside_group += order[0] / 2 != order[1] / 2;
      std::vector<double> s(E);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) {
        s[e] = sigmoid ? 1.0 / (1.0 + std::exp(-double(l[e]))) : std::exp(double(l[e]));
        sum += s[e];
      }
      for (int64_t e = 0; e < E; ++e) score[e] += s[e] / sum;
    }
    double balance = 0;
    for (int64_t e = 0; e < E; ++e) balance += double(E) / (K * N) * count[e] * score[e] / N;
    CHECK(outside_group > 0);  // the group limit changed some tokens' picks
    CHECK(h.moe.aux_loss(h.buf) == Approx(0.5 * balance).epsilon(1e-5));
  }
}
