// On 2 or 4 MPI ranks: gradient buckets reduced during the last micro-batch's
// backward (as the model reports each gradient final, the GPU path) give
// bit-identical losses and gradient norms to reducing after backward, with
// small buckets so most go out early: dp 2 gpt2 (tied embeddings) and llama
// with ZeRO 1; on 4 ranks dp2 x tp2 with sequence parallelism (norm gradients
// summed over tp after backward) and llama with one KV head replicated over
// tp (summed over its replicas after backward); and a batch ramp (one
// micro-batch a rank, then two). A gradient reported final too
// early would be averaged before the rest of backward adds to it.
// Usage: mpirun -np 2|4 engine_mpi_dp_overlap
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../parallel/mpi_check.h"
#include "engine/mesh_from_spec.h"
#include "engine/trainer.h"
#include "parallel/launch_env.h"
#include "parallel/mesh.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::parallel;

namespace {

struct Case {
  std::string name;
  JobSpec spec;
  bool some_after_backward;  // gradients changed after backward exist: not every bucket goes early
};

std::vector<Case> cases(int world) {
  std::vector<Case> out;
  auto base = [&](Family f) {
    JobSpec s = testing::tiny_job(f, 4);
    s.source_path = "mpi_dp_overlap";
    s.train.global_batch = 8;  // 2 micro-batches per dp rank
    return s;
  };
  if (world == 2) {
    JobSpec g = base(Family::gpt2);
    g.parallel.zero = 0;
    out.push_back({"gpt2 dp2 zero0", g, false});
    JobSpec l = base(Family::llama);
    l.parallel.zero = 1;
    out.push_back({"llama dp2 zero1", l, false});
    // train.rampup_batch_size: step 1 has one micro-batch per rank, so its
    // first is the last one, whose backward feeds the buckets.
    l.train.rampup_batch_size = TrainSpec::Rampup{4, 4, 4};
    out.push_back({"llama dp2 zero1, batch 4 then 8", l, false});
  } else {
    JobSpec g = base(Family::gpt2);
    g.parallel.tp = 2;
    g.parallel.sequence_parallel = true;
    out.push_back({"gpt2 dp2 x tp2 + sp", g, true});
    JobSpec l = base(Family::llama);
    l.parallel.tp = 2;
    l.model.n_kv_head = 1;  // one KV head on both tp ranks
    out.push_back({"llama dp2 x tp2, KV head replicated", l, true});
  }
  return out;
}

struct Run {
  std::vector<std::pair<double, double>> steps;  // (loss, grad norm)
  int early = 0, buckets = 0;
};

Run train(const JobSpec& spec, Mesh& mesh, TrainerOptions::GradOverlap overlap) {
  TrainerOptions o = testing::quiet_options();
  o.grad_overlap = overlap;
  o.grad_bucket_bytes = 2048;
  Trainer t(spec, mesh, o);
  Run r;
  for (int s = 1; s <= spec.train.steps; ++s) {
    StepRecord rec = t.train_step(s);
    r.steps.emplace_back(rec.loss, rec.grad_norm);
  }
  const GradReducer* red = t.grad_reducer();
  MPI_TEST_CHECK(red != nullptr, mesh.rank());
  r.early = red->buckets_reduced_early();
  r.buckets = static_cast<int>(red->buckets().size());
  return r;
}

}  // namespace

int main() {
  return run_mpi_test([&] {
    const LaunchEnv env = detect_launch_env();
    MPI_TEST_CHECK(env.world == 2 || env.world == 4, env.rank);
    for (const Case& c : cases(env.world)) {
      Mesh mesh(env, resolve_job_mesh(c.spec, env.world), Device::cpu, 60.0);
      const Run after = train(c.spec, mesh, TrainerOptions::GradOverlap::off);
      const Run during = train(c.spec, mesh, TrainerOptions::GradOverlap::on);
      if (mesh.rank() == 0)
        std::printf("%s: %d of %d buckets reduced during backward; losses %s\n", c.name.c_str(),
                    during.early, during.buckets,
                    during.steps == after.steps ? "bit-identical" : "DIFFER");
      MPI_TEST_CHECK(after.early == 0, mesh.rank());
      MPI_TEST_CHECK(during.buckets > 4 && during.early > 0, mesh.rank());
      MPI_TEST_CHECK(c.some_after_backward == (during.early < during.buckets), mesh.rank());
      for (size_t s = 0; s < after.steps.size(); ++s) {
        if (during.steps[s] != after.steps[s])
          std::fprintf(stderr, "rank %d %s step %zu: loss %.17g vs %.17g, grad norm %.17g vs %.17g\n",
                       mesh.rank(), c.name.c_str(), s + 1, during.steps[s].first,
                       after.steps[s].first, during.steps[s].second, after.steps[s].second);
        MPI_TEST_CHECK(during.steps[s] == after.steps[s], mesh.rank());
      }
    }
  });
}
