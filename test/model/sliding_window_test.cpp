// Sliding-window attention through the whole model (ModelConfig::sliding_window,
// full_attention_every): a token's losses depend on no token more than
// n_layer x (window - 1) positions back, a window as long as the sequence is
// plain causal attention bit for bit, full-attention layers among windowed
// ones are the right ones, and the gradients match finite differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "model/model.h"
#include "test/common/model_run.h"

using namespace trainer;
using namespace trainer::model;

namespace {

ModelConfig tiny(Family family, int64_t window, int full_every = 0, int layers = 2) {
  ModelConfig cfg = testing::whole_model_config(family);
  cfg.n_layer = layers;
  cfg.sliding_window = window;
  cfg.full_attention_every = full_every;
  return cfg;
}

using Run = testing::ModelRun;

std::vector<int32_t> random_ids(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % 50);
  return v;
}

}  // namespace

TEST_CASE("a sliding window limits how far back a token's loss reaches", "[cpu][model][window]") {
  // Two layers with a window of 3: position t reads positions t-2..t in each
  // layer, so its loss depends on tokens t-4..t and on no earlier one.
  for (Family family : {Family::gpt2, Family::llama}) {
    INFO((family == Family::gpt2 ? "gpt2" : "llama"));
    const int64_t T = 16, W = 3, reach = 2 * (W - 1);
    Run run(tiny(family, W), 1, T);
    const std::vector<int32_t> ids = random_ids(T, 1), targets = random_ids(T, 2);
    run.set_tokens(ids, targets);
    const std::vector<float> base = run.losses();
    const int64_t changed = 5;
    std::vector<int32_t> other = ids;
    other[changed] = (other[changed] + 17) % 50;
    run.set_tokens(other, targets);
    const std::vector<float> after = run.losses();
    for (int64_t t = 0; t < T; ++t) {
      INFO("position " << t);
      if (t < changed || t > changed + reach) CHECK(after[t] == base[t]);
      else if (t == changed + reach) CHECK(after[t] != base[t]);  // the window's far end still sees it
    }
  }
}

TEST_CASE("a sliding window as long as the sequence is plain causal attention",
          "[cpu][model][window]") {
  for (Family family : {Family::gpt2, Family::llama}) {
    const int64_t B = 2, T = 12;
    const std::vector<int32_t> ids = random_ids(B * T, 3), targets = random_ids(B * T, 4);
    Run full(tiny(family, 0), B, T), wide(tiny(family, T), B, T), narrow(tiny(family, T - 1), B, T);
    full.set_tokens(ids, targets);
    wide.set_tokens(ids, targets);
    narrow.set_tokens(ids, targets);
    const std::vector<float> a = full.losses();
    CHECK(wide.losses() == a);
    // One key fewer changes only the last position of each sequence.
    const std::vector<float> n = narrow.losses();
    for (int64_t i = 0; i < B * T; ++i)
      if (i % T == T - 1) CHECK(n[i] != a[i]);
      else CHECK(n[i] == a[i]);
  }
}

TEST_CASE("sliding-window model gradients match finite differences", "[cpu][model][window]") {
  for (Family family : {Family::gpt2, Family::llama}) {
    INFO((family == Family::gpt2 ? "gpt2" : "llama"));
    Run run(tiny(family, 2), 2, 6);
    run.set_tokens(random_ids(12, 5), random_ids(12, 6));
    testing::check_sampled_gradients(run, 11);
  }
}

TEST_CASE("a sliding window counts the attention FLOPs of the keys a query may see",
          "[cpu][model][window]") {
  // flops_per_token counts QK^T and PV over every key a query may see (the
  // whole sequence, as PaLM counts): a window of W < T takes off
  // 3 (forward + backward) x n_layer x 2 GEMMs x 2 (T - W) H D.
  const int64_t T = 12, W = 5;
  const ModelConfig cfg = tiny(Family::llama, 0);
  Model full(cfg, BatchShape{1, T}), wide(tiny(Family::llama, T + 3), BatchShape{1, T}),
      narrow(tiny(Family::llama, W), BatchShape{1, T});
  CHECK(wide.flops_per_token() == full.flops_per_token());
  const double H = cfg.n_head, D = cfg.head_dim();
  CHECK(full.flops_per_token() - narrow.flops_per_token() ==
        Approx(3.0 * cfg.n_layer * 2 * 2 * (T - W) * H * D).epsilon(1e-12));
}

TEST_CASE("model.full_attention_every keeps layers N, 2N, ... in full attention",
          "[cpu][model][window]") {
  CHECK(tiny(Family::llama, 4, 3, 7).window_of(0) == 4);
  CHECK(tiny(Family::llama, 4, 3, 7).window_of(2) == 0);  // layer 3 of 1-based counting
  CHECK(tiny(Family::llama, 4, 3, 7).window_of(5) == 0);
  CHECK(tiny(Family::llama, 4, 3, 7).window_of(6) == 4);
  CHECK(tiny(Family::llama, 4, 0, 7).window_of(2) == 4);
  CHECK(tiny(Family::llama, 0, 0, 7).window_of(2) == 0);
  // Three layers, window 2, the third in full: a token's loss depends on
  // every earlier token. With every layer windowed it reaches back 3 tokens.
  const int64_t T = 12;
  const std::vector<int32_t> ids = random_ids(T, 7), targets = random_ids(T, 8);
  std::vector<int32_t> other = ids;
  other[0] = (other[0] + 11) % 50;
  auto changed = [&](const ModelConfig& cfg) {
    Run run(cfg, 1, T);
    run.set_tokens(ids, targets);
    const std::vector<float> a = run.losses();
    run.set_tokens(other, targets);
    const std::vector<float> b = run.losses();
    std::vector<bool> out;
    for (int64_t t = 0; t < T; ++t) out.push_back(a[t] != b[t]);
    return out;
  };
  const std::vector<bool> windowed = changed(tiny(Family::llama, 2, 0, 3));
  const std::vector<bool> last_full = changed(tiny(Family::llama, 2, 3, 3));
  for (int64_t t = 0; t < T; ++t) {
    INFO("position " << t);
    CHECK(windowed[t] == (t <= 3));
    CHECK(last_full[t]);
  }
  // A pattern longer than the model windows every layer: the same bits.
  Run all(tiny(Family::llama, 2, 0, 3), 1, T), long_pattern(tiny(Family::llama, 2, 4, 3), 1, T);
  all.set_tokens(ids, targets);
  long_pattern.set_tokens(ids, targets);
  CHECK(all.losses() == long_pattern.losses());
  // The FLOPs count each layer's own keys: the full layer's 12, the others' 2.
  Model full(tiny(Family::llama, 0, 0, 3), BatchShape{1, T}), patterned(tiny(Family::llama, 2, 3, 3), BatchShape{1, T});
  const ModelConfig cfg = tiny(Family::llama, 0, 0, 3);
  CHECK(full.flops_per_token() - patterned.flops_per_token() ==
        Approx(3.0 * 2 * 2 * 2 * (T - 2) * cfg.n_head * cfg.head_dim()).epsilon(1e-12));
}

TEST_CASE("sliding-window model gradients with a full-attention layer match finite differences",
          "[cpu][model][window]") {
  Run run(tiny(Family::llama, 2, 2, 2), 2, 6);
  run.set_tokens(random_ids(12, 5), random_ids(12, 6));
  testing::check_sampled_gradients(run, 13);
}
