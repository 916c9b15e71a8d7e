// Full activation recomputation (parallel.recompute: full) runs the same ops
// in the same order, so it must give bit-identical losses, gradient norms and
// MoE statistics, while the plan keeps only one block's internal activations.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model_from_spec.h"
#include "engine/trainer.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;

namespace {

struct Run {
  std::vector<StepRecord> steps;
  MemoryPlan plan;
};

Run run(JobSpec spec, Recompute recompute, int num_layers = 0) {
  spec.parallel.recompute = recompute;
  spec.parallel.recompute_num_layers = num_layers;
  Trainer t(spec, testing::quiet_options());
  testing::train_losses(t, 1, spec.train.steps);
  return {t.history(), t.plan()};
}

size_t bytes(const MemoryPlan& p, model::Category c) { return p.category[static_cast<int>(c)]; }

void require_same_steps(const Run& a, const Run& b) {
  REQUIRE(a.steps.size() == b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    CHECK(a.steps[i].loss == b.steps[i].loss);
    CHECK(a.steps[i].grad_norm == b.steps[i].grad_norm);
    if (!std::isnan(a.steps[i].moe_imbalance)) {
      CHECK(a.steps[i].moe_aux_loss == b.steps[i].moe_aux_loss);
      CHECK(a.steps[i].moe_imbalance == b.steps[i].moe_imbalance);
      CHECK(a.steps[i].moe_dropped == b.steps[i].moe_dropped);
    }
  }
}

}  // namespace

TEST_CASE("recompute full: bit-identical training, one block's activations kept",
          "[cpu][engine]") {
  for (Family f : {Family::gpt2, Family::llama}) {
    JobSpec spec = testing::tiny_job(f, 4);
    spec.model.n_layer = 3;
    Run none = run(spec, Recompute::none), full = run(spec, Recompute::full);
    require_same_steps(none, full);
    // Identical blocks: each kept everything inside it; now they share one region.
    using model::Category;
    const size_t saved = bytes(none.plan, Category::activations) - bytes(full.plan, Category::activations);
    CHECK(bytes(none.plan, Category::recomputed) == 0);
    CHECK(bytes(full.plan, Category::recomputed) > 0);
    CHECK(saved == size_t(spec.model.n_layer) * bytes(full.plan, Category::recomputed));
    CHECK(none.plan.total() - full.plan.total() ==
          size_t(spec.model.n_layer - 1) * bytes(full.plan, Category::recomputed));
  }
}

TEST_CASE("recompute_num_layers: only the first blocks are recomputed, bit-identically",
          "[cpu][engine]") {
  for (Family f : {Family::gpt2, Family::llama}) {
    JobSpec spec = testing::tiny_job(f, 4);
    spec.model.n_layer = 4;
    const Run none = run(spec, Recompute::none), full = run(spec, Recompute::full);
    using model::Category;
    const size_t region = bytes(full.plan, Category::recomputed);
    for (int n : {1, 2, 3, 4, 9}) {
      INFO("recompute_num_layers " << n);
      const Run part = run(spec, Recompute::full, n);
      require_same_steps(none, part);
      // The first min(n, 4) blocks share the region; the others keep their own.
      const size_t recomputed = size_t(std::min(n, spec.model.n_layer));
      CHECK(bytes(part.plan, Category::recomputed) == region);
      CHECK(bytes(none.plan, Category::activations) - bytes(part.plan, Category::activations) ==
            recomputed * region);
      CHECK(none.plan.total() - part.plan.total() == (recomputed - 1) * region);
    }
  }
}

TEST_CASE("recompute full: MoE counters count each micro-batch once, bf16 and fp8 identical",
          "[cpu][engine]") {
  JobSpec spec = testing::tiny_job(Family::llama, 4);
  spec.model.moe.enabled = true;
  spec.model.moe.n_experts = 4;
  spec.model.moe.d_ff_expert = 32;
  spec.model.moe.z_loss_coeff = 1e-3;
  spec.model.moe.capacity_factor = 1.0;  // drops, so the drop counter is exercised
  require_same_steps(run(spec, Recompute::none), run(spec, Recompute::full));
  spec.model.moe.balance = Balance::aux_free;  // the bias update reads the step counters
  require_same_steps(run(spec, Recompute::none), run(spec, Recompute::full));

  JobSpec dense = testing::tiny_job(Family::gpt2, 4);
  dense.model.n_layer = 4;  // fp8 keeps the first and last bf16: two fp8 layers
  for (ComputeDtype dt : {ComputeDtype::bf16, ComputeDtype::fp8}) {
    dense.precision.compute = dt;
    require_same_steps(run(dense, Recompute::none), run(dense, Recompute::full));
  }
}
