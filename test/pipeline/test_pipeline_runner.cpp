// Pipeline stages of the real model: activation slots per 1F1B rank, and a
// model cut into stages (run one after another, stage I/O copied by hand)
// reproducing the whole model's losses, parameters and gradients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/pipeline_runner.h"
#include "kernels/memory.h"
#include "model/model.h"
#include "test/common/host_arenas.h"

using namespace trainer;
using namespace trainer::model;

TEST_CASE("pipeline runner: 1F1B activation slots are the warm-up forwards plus one", "[cpu][pipeline]") {
  for (int p : {2, 3, 4, 8})
    for (int m : {1, 2, 3, 8, 16})
      for (int r = 0; r < p; ++r) {
        INFO("pp " << p << " rank " << r << " micro-batches " << m);
        // Megatron: rank r holds at most min(p - r, m) micro-batches' activations.
        CHECK(engine::activation_slots(parallel::schedule_1f1b(p, r, m)) == std::min(p - r, m));
      }
}

namespace {

struct Run {
  Context ctx;
  Model model;
  testing::HostArenas arenas;

  Run(const ModelConfig& cfg, BatchShape batch) : model(cfg, batch), arenas(model.buffers()) {
    model.init_parameters(ctx);
    model.zero_grads(ctx);
  }
  std::vector<float> host(Tensor t) {
    std::vector<float> v(t.numel());
    copy_to_host(v.data(), t);
    return v;
  }
};

void fill_tokens(Tensor t, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
}

void check_stages_match_whole(ModelConfig cfg, int pp) {
  const BatchShape batch{2, 5};
  Run whole(cfg, batch);
  fill_tokens(whole.model.input_ids(), cfg.vocab_size, 1);
  fill_tokens(whole.model.targets(), cfg.vocab_size, 2);
  whole.model.forward(whole.ctx);
  std::vector<float> want_loss = whole.host(whole.model.losses(whole.ctx));
  whole.model.backward(whole.ctx, 0.5f);

  std::vector<std::unique_ptr<Run>> stages;
  for (int s = 0; s < pp; ++s) {
    ModelConfig c = cfg;
    engine::apply_pipeline_stage(c, pp, s);
    stages.push_back(std::make_unique<Run>(c, batch));
  }
  fill_tokens(stages.front()->model.input_ids(), cfg.vocab_size, 1);
  fill_tokens(stages.back()->model.targets(), cfg.vocab_size, 2);
  for (int s = 0; s < pp; ++s) {
    Run& r = *stages[s];
    if (s > 0) copy_from_host(r.model.stage_input(), stages[s - 1]->host(stages[s - 1]->model.stage_output(stages[s - 1]->ctx)).data());
    r.model.forward(r.ctx);
  }
  std::vector<float> got_loss = stages.back()->host(stages.back()->model.losses(stages.back()->ctx));
  REQUIRE(got_loss.size() == want_loss.size());
  for (size_t i = 0; i < got_loss.size(); ++i) CHECK(got_loss[i] == Approx(want_loss[i]).epsilon(1e-6));
  for (int s = pp - 1; s >= 0; --s) {
    Run& r = *stages[s];
    if (s < pp - 1) copy_from_host(r.model.stage_output_grad(), stages[s + 1]->host(stages[s + 1]->model.stage_input_grad()).data());
    r.model.backward(r.ctx, 0.5f);
  }

  // Every parameter of the whole model is on exactly one stage (plus the
  // last stage's tied copy), with the same values and gradient; the tied
  // table's gradient is the sum of its two copies'.
  std::map<std::string, std::vector<float>> grads;
  int copies = 0;
  for (auto& st : stages) {
    Buffers& b = st->model.buffers();
    for (const auto& p : b.params()) {
      std::vector<float> g = st->host(b.get(p.grad));
      if (p.spec.tied_copy) {
        ++copies;
        REQUIRE(st.get() == stages.back().get());
      }
      auto [it, fresh] = grads.emplace(p.spec.name, g);
      REQUIRE((fresh || p.spec.tied_copy));
      if (!fresh)
        for (size_t i = 0; i < g.size(); ++i) it->second[i] += g[i];
      const Buffers& wb = whole.model.buffers();
      auto wp = std::find_if(wb.params().begin(), wb.params().end(),
                             [&](const Buffers::Param& q) { return q.spec.name == p.spec.name; });
      REQUIRE(wp != wb.params().end());
      CHECK(st->host(b.get(p.value)) == whole.host(wb.get(wp->value)));
    }
  }
  CHECK(copies == (cfg.tie_embeddings ? 1 : 0));
  const Buffers& wb = whole.model.buffers();
  REQUIRE(grads.size() == wb.params().size());
  for (const auto& p : wb.params()) {
    INFO(p.spec.name);
    std::vector<float> want = whole.host(wb.get(p.grad)), got = grads.at(p.spec.name);
    double scale = 1e-6;
    for (float w : want) scale = std::max(scale, double(std::abs(w)));
    for (size_t i = 0; i < want.size(); ++i) REQUIRE(std::abs(got[i] - want[i]) <= 1e-5 * scale);
  }
}

ModelConfig small(Family f) {
  ModelConfig cfg;
  cfg.family = f;
  cfg.n_layer = 4;
  cfg.d_model = 16;
  cfg.n_head = 2;
  cfg.n_kv_head = f == Family::llama ? 1 : 2;
  cfg.d_ff = 32;
  cfg.vocab_size = 50;
  cfg.max_seq_len = 8;
  cfg.tie_embeddings = f == Family::gpt2;
  return cfg;
}

}  // namespace

TEST_CASE("gpt2 cut into pipeline stages computes the whole model", "[cpu][pipeline]") {
  for (int pp : {2, 3, 4}) {
    INFO("pp " << pp);
    check_stages_match_whole(small(Family::gpt2), pp);
  }
}

TEST_CASE("llama cut into pipeline stages computes the whole model", "[cpu][pipeline]") {
  ModelConfig cfg = small(Family::llama);
  check_stages_match_whole(cfg, 3);
  cfg.tie_embeddings = true;
  check_stages_match_whole(cfg, 2);
}
