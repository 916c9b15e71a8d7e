// ZeRO layouts by unit part: with experts split over ep, every dense element's
// optimizer state is held by exactly one rank of the dense group and every
// routed expert element's by exactly one of the edp group, with ZeRO 1/2
// (parameters kept whole) as with ZeRO-3 (blocks in a shared region).
#include <catch2/catch.hpp>

#include <vector>

#include "engine/zero_layout.h"
#include "model/model.h"
#include "test/common/tiny_model.h"

using namespace trainer;
using namespace trainer::engine;

namespace {
model::ModelConfig moe_config(int zero, int dense_ranks) {
  model::ModelConfig cfg = testing::tiny_model_config(model::Family::llama, 2);
  cfg.moe_enabled = true;
  cfg.moe_every = 2;  // layer 1
  cfg.moe.n_experts = 4;
  cfg.moe.d_ff_expert = 8;
  cfg.moe.n_shared_experts = 1;
  cfg.moe.ep = 2;
  apply_zero_sharding(cfg, zero, {parallel::Axis::dp, parallel::Axis::edp}, dense_ranks);
  return cfg;
}
}  // namespace

TEST_CASE("ZeRO by unit part: dense state over dp, routed experts' over edp, each element once",
          "[cpu][engine]") {
  const int dp = 4, edp = 2;  // ep 2
  for (int zero : {1, 2, 3}) {
    INFO("zero " << zero);
    model::Model m(moe_config(zero, dp), model::BatchShape{1, 4});
    const model::Buffers& b = m.buffers();
    REQUIRE(b.parts_padded());
    CHECK(b.blocks_shared() == (zero == 3));
    std::vector<ZeroLayout> layouts;
    for (int r = 0; r < dp; ++r)
      layouts.push_back(zero_layout(b, zero, {dp, r}, {edp, r / 2}));
    int64_t dense_total = 0, expert_total = 0;
    bool any_expert = false;
    for (int i = 0; i < static_cast<int>(b.params().size()); ++i) {
      const model::Buffers::Param& p = b.params()[i];
      const int64_t n = int64_t(b.buffers()[p.value].bytes / sizeof(float));
      (p.spec.expert ? expert_total : dense_total) += n;
      any_expert |= p.spec.expert;
      // Ranks 0, 1 (edp 0) and 2, 3 (edp 1): one edp group's members are r and r + 2.
      for (int first : {0, 1}) {
        std::vector<int> held(static_cast<size_t>(n), 0);
        for (int r = 0; r < dp; ++r) {
          if (p.spec.expert && r % 2 != first) continue;  // another ep rank's experts
          const OwnedPart o = owned_part(layouts[r], b, i);
          for (int64_t e = o.lo; e < o.hi; ++e) ++held[static_cast<size_t>(e)];
        }
        INFO(p.spec.name);
        for (int c : held) REQUIRE(c == 1);
        if (!p.spec.expert) break;
      }
    }
    REQUIRE(any_expert);
    int64_t state = 0;
    for (const ZeroLayout& z : layouts) {
      CHECK(z.stage == zero);
      CHECK(z.by_unit_parts());
      CHECK(z.shards_parameters() == (zero == 3));
      state += z.state_elems;
    }
    // Every rank's state: a quarter of the dense parameters and half its
    // experts', padding aside (each part is padded to dp * 64 elements).
    CHECK(state >= dense_total + 2 * expert_total);
    CHECK(layouts[0].state_elems < (dense_total + expert_total) / 2);
  }
}

TEST_CASE("ZeRO without experts apart shards the flat arena as one range", "[cpu][engine]") {
  model::ModelConfig cfg = moe_config(1, 4);
  cfg.shard_align = zero_shard_align(1, 4, false);
  cfg.shard_experts_apart = false;
  cfg.moe.ep = 1;
  CHECK(cfg.shard_align == 0);
  model::Model m(cfg, model::BatchShape{1, 4});
  const ZeroLayout z = zero_layout(m.buffers(), 1, {4, 1}, {4, 1});
  CHECK_FALSE(z.by_unit_parts());
  REQUIRE(z.owned.size() == 1);
  CHECK(z.arena_shard.shard * 4 == z.arena_shard.padded);
  CHECK(z.owned[0].begin == z.arena_shard.begin);
}
