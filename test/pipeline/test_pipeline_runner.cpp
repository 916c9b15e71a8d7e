// Pipeline stages of the real model: activation slots per 1F1B and
// interleaved rank, and a model cut into stages, or into interleaved chunks
// (run one global stage after another, each chunk bound to its own activation
// slot, stage I/O copied by hand), reproducing the whole model's losses,
// parameters and gradients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/memory_plan.h"
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
  // One activation slot per chunk, in reverse chunk order, so a chunk's
  // buffers work only through bind_chunk (never at their declared place).
  std::vector<std::vector<char>> slot_mem;

  Run(const ModelConfig& cfg, BatchShape batch) : model(cfg, batch), arenas(model.buffers()) {
    model.init_parameters(ctx);
    model.zero_grads(ctx);
    for (int c = model.num_chunks() - 1; c >= 0; --c)
      slot_mem.emplace_back(model.chunk_activation_bytes(c) + 256, 0);
  }
  void bind(int chunk) {
    std::vector<char>& m = slot_mem[model.num_chunks() - 1 - chunk];
    REQUIRE(m.size() == model.chunk_activation_bytes(chunk) + 256);
    char* p = m.data();
    p += (256 - reinterpret_cast<uintptr_t>(p) % 256) % 256;
    model.bind_chunk(chunk, p, Device::cpu);
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

// Runs the pp ranks' models (virtual_stages chunks each) one global stage
// after another, stage I/O copied by hand, and compares with the whole model.
void check_stages_match_whole(ModelConfig cfg, int pp, int virtual_stages = 1) {
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
    engine::apply_pipeline_stage(c, pp, s, virtual_stages);
    stages.push_back(std::make_unique<Run>(c, batch));
    REQUIRE(stages.back()->model.num_chunks() == virtual_stages);
  }
  Run& first = *stages.front();
  Run& last = *stages.back();
  first.bind(0);
  fill_tokens(first.model.input_ids(), cfg.vocab_size, 1);
  last.bind(virtual_stages - 1);
  fill_tokens(last.model.targets(), cfg.vocab_size, 2);
  // Global stage g is chunk g / pp of rank g % pp.
  const int S = pp * virtual_stages;
  std::vector<float> carry;
  for (int g = 0; g < S; ++g) {
    Run& r = *stages[g % pp];
    const int c = g / pp;
    r.bind(c);
    CHECK(r.model.has_embedding(c) == (g == 0));
    CHECK(r.model.has_head(c) == (g == S - 1));
    if (g > 0) copy_from_host(r.model.stage_input(c), carry.data());
    r.model.forward(r.ctx, c);
    if (g < S - 1) carry = r.host(r.model.stage_output(r.ctx, c));
  }
  std::vector<float> got_loss = last.host(last.model.losses(last.ctx));
  REQUIRE(got_loss.size() == want_loss.size());
  for (size_t i = 0; i < got_loss.size(); ++i) CHECK(got_loss[i] == Approx(want_loss[i]).epsilon(1e-6));
  for (int g = S - 1; g >= 0; --g) {
    Run& r = *stages[g % pp];
    const int c = g / pp;
    r.bind(c);
    if (g < S - 1) copy_from_host(r.model.stage_output_grad(c), carry.data());
    r.model.backward(r.ctx, 0.5f, c);
    carry = r.host(r.model.stage_input_grad());
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

TEST_CASE("interleaved: a rank's chunks hold the layers of global stages chunk * pp + rank",
          "[cpu][pipeline]") {
  ModelConfig cfg = small(Family::gpt2);
  cfg.n_layer = 8;
  for (int r = 0; r < 2; ++r) {
    ModelConfig c = cfg;
    engine::apply_pipeline_stage(c, 2, r, 2);
    // 8 layers in 4 global stages of 2: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
    REQUIRE(c.chunk_layers.size() == 2);
    CHECK(c.chunk_layers[0] == std::pair{2 * r, 2 * r + 2});
    CHECK(c.chunk_layers[1] == std::pair{4 + 2 * r, 4 + 2 * r + 2});
    CHECK(c.first_stage == (r == 0));
    CHECK(c.last_stage == (r == 1));
    Model m(c, BatchShape{2, 5});
    std::vector<std::string> blocks;
    for (const auto& p : m.buffers().params())
      if (p.spec.name.ends_with(".ln_1.weight")) blocks.push_back(p.spec.name);
    std::vector<std::string> want;
    for (int l : {2 * r, 2 * r + 1, 4 + 2 * r, 5 + 2 * r})
      want.push_back("transformer.h." + std::to_string(l) + ".ln_1.weight");
    CHECK(blocks == want);
    // The chunks' regions tile the activations: a slot holds one chunk.
    CHECK(m.chunk_activation_bytes(0) + m.chunk_activation_bytes(1) ==
          m.buffers().category_bytes(Category::activations));
    CHECK(m.chunk_activation_bytes(0) > 0);
    CHECK(m.chunk_activation_bytes(1) > 0);
  }
  Model one(small(Family::gpt2), BatchShape{2, 5});
  CHECK(one.num_chunks() == 1);
  CHECK(one.chunk_activation_bytes(0) == one.buffers().category_bytes(Category::activations));
}

TEST_CASE("interleaved: a chunk's buffers are refused while another chunk is bound", "[cpu][pipeline]") {
  ModelConfig cfg = small(Family::llama);
  engine::apply_pipeline_stage(cfg, 2, 1, 2);
  Run r(cfg, BatchShape{2, 5});
  r.bind(1);
  CHECK_NOTHROW(r.model.stage_input(1));
  CHECK_THROWS_AS(r.model.stage_input(0), Error);
  CHECK_THROWS_AS(r.model.forward(r.ctx, 0), Error);
  r.bind(0);
  CHECK_NOTHROW(r.model.stage_output_grad(0));
}

TEST_CASE("interleaved activation slots: one per (micro-batch, chunk) the schedule holds",
          "[cpu][pipeline]") {
  for (int p : {2, 3, 4})
    for (int v : {2, 3})
      for (int m : {p, 2 * p, 4 * p})
        for (int r = 0; r < p; ++r) {
          INFO("pp " << p << " v " << v << " rank " << r << " micro-batches " << m);
          parallel::Schedule t = parallel::schedule_interleaved(p, r, m, v);
          // No receive runs ahead of the compute that frees a slot: the slots
          // are exactly the (micro-batch, chunk) pairs between forward and backward.
          CHECK(engine::activation_slots(t) == parallel::peak_in_flight(t));
          // Per chunk: the most of its micro-batches forwarded and not yet backwarded.
          std::vector<int> live(v, 0), peak(v, 0);
          for (const parallel::Action& a : t) {
            if (a.kind == parallel::ActionKind::forward)
              peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
            if (a.kind == parallel::ActionKind::backward) --live[a.chunk];
          }
          CHECK(engine::chunk_slots(t, v) == peak);
        }
}

TEST_CASE("gpt2 cut into interleaved chunks computes the whole model", "[cpu][pipeline]") {
  ModelConfig cfg = small(Family::gpt2);
  check_stages_match_whole(cfg, 2, 2);
  cfg.n_layer = 6;
  check_stages_match_whole(cfg, 3, 2);
  check_stages_match_whole(cfg, 2, 3);
}

TEST_CASE("llama cut into interleaved chunks computes the whole model", "[cpu][pipeline]") {
  ModelConfig cfg = small(Family::llama);
  check_stages_match_whole(cfg, 2, 2);
  cfg.tie_embeddings = true;
  cfg.n_layer = 8;
  check_stages_match_whole(cfg, 2, 4);
}

TEST_CASE("memory plan: each chunk's slot pool follows the previous one", "[cpu][pipeline]") {
  engine::MemoryPlan plan;
  plan.chunk_slots = {{3, 512}, {2, 256}};
  CHECK(plan.activation_slot_offset(0, 0) == 0);
  CHECK(plan.activation_slot_offset(0, 2) == 1024);
  CHECK(plan.activation_slot_offset(1, 0) == 1536);
  CHECK(plan.activation_slot_offset(1, 1) == 1792);
  CHECK_THROWS_AS(plan.activation_slot_offset(1, 2), Error);
  for (int p : {2, 4})
    for (int r = 0; r < p; ++r) {
      parallel::Schedule t = parallel::schedule_1f1b(p, r, 8);
      CHECK(engine::chunk_slots(t, 1) == std::vector<int>{engine::activation_slots(t)});
    }
}

// train.rampup_batch_size runs steps of fewer micro-batches with slot pools
// planned for the full batch (Trainer::pipeline_for): no table of fewer
// micro-batches may need more slots of any chunk.
TEST_CASE("fewer micro-batches never need more activation slots", "[cpu][pipeline]") {
  for (int p = 2; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int r = 0; r < p; ++r) {
        const int step = v > 1 ? p : 1;  // interleaved: micro-batches in groups of pp
        std::vector<int> prev(v, 0);
        for (int m = step; m <= 6 * p; m += step) {
          INFO("pp " << p << " v " << v << " rank " << r << " micro-batches " << m);
          const std::vector<int> now = engine::chunk_slots(parallel::pipeline_schedule(p, r, m, v), v);
          for (int c = 0; c < v; ++c) CHECK(now[c] >= prev[c]);
          prev = now;
        }
      }
}
