// The training loop on synthetic tokens: the memory plan is exactly what is
// allocated, two runs are bit-identical, gradient accumulation equals one big
// micro-batch, and the loss falls on a learnable stream.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model_from_spec.h"
#include "engine/trainer.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;

namespace {

JobSpec tiny_spec(Family family) { return testing::tiny_job(family, 6); }

// The losses of a whole run of spec.
std::vector<double> losses(const JobSpec& spec) {
  Trainer t(spec, testing::quiet_options());
  return testing::train_losses(t, 1, spec.train.steps);
}

}  // namespace

TEST_CASE("train allocates exactly the memory plan", "[cpu][engine]") {
  JobSpec spec = tiny_spec(Family::gpt2);
  Trainer t(spec, testing::quiet_options());
  // What `trainer plan` computes: a fresh model and optimizer, nothing allocated.
  model::Model m(model_config(spec), micro_batch_shape(spec));
  AdamW opt(spec.optimizer, m.buffers());
  MemoryPlan plan = plan_memory(m.buffers(), opt);
  CHECK(plan.total() == t.plan().total());
  CHECK(t.allocated_bytes() == plan.total());
  CHECK(plan.optimizer == 2 * plan.category[0]);
}

TEST_CASE("two runs of the same job give bit-identical losses", "[cpu][engine]") {
  for (Family f : {Family::gpt2, Family::llama}) {
    JobSpec spec = tiny_spec(f);
    std::vector<double> a = losses(spec), b = losses(spec);
    CHECK(a == b);
  }
}

TEST_CASE("gradient accumulation equals one larger micro-batch", "[cpu][engine]") {
  JobSpec spec = tiny_spec(Family::llama);
  spec.optimizer.grad_clip = 0;
  std::vector<double> accum = losses(spec);  // 2 micro-batches of 2
  spec.train.micro_batch = 4;
  std::vector<double> single = losses(spec);  // 1 micro-batch of 4
  REQUIRE(accum.size() == single.size());
  for (size_t i = 0; i < accum.size(); ++i) CHECK(accum[i] == Approx(single[i]).epsilon(1e-5));
}

// log.params_norm: after each step, the L2 norm of every parameter element
// (the tied table once), as summed here from the model's buffers in double.
TEST_CASE("log.params_norm is the norm of the parameters after the step", "[cpu][engine]") {
  for (Family family : {Family::gpt2, Family::llama}) {
    JobSpec spec = tiny_spec(family);
    spec.log.params_norm = true;
    Trainer t(spec, testing::quiet_options());
    for (int step = 1; step <= 2; ++step) {
      const StepRecord r = t.train_step(step);
      double sq = 0;
      for (const auto& p : t.model().buffers().params()) {
        Tensor w = t.model().buffers().get(p.value);
        for (int64_t i = 0; i < w.numel(); ++i) sq += double(w.ptr<float>()[i]) * w.ptr<float>()[i];
      }
      CHECK(r.params_norm == Approx(std::sqrt(sq)).epsilon(1e-6));
    }
    spec.log.params_norm = false;
    Trainer off(spec, testing::quiet_options());
    CHECK(std::isnan(off.train_step(1).params_norm));
  }
}
