// trainer train JOB.yaml [--set key.path=value ...]
#include <fmt/format.h>

#include <cstdio>

#include "cmd/subcommand.h"
#include "engine/config/job_spec.h"
#include "engine/device.h"
#include "engine/mesh_from_spec.h"
#include "engine/trainer.h"
#include "parallel/launch_env.h"
#include "parallel/mesh.h"

namespace trainer::cmd {
namespace {

struct TrainArgs {
  std::string job;
  std::vector<std::string> overrides;
};

Registrar reg("train", "train a model from a YAML job spec", [](CLI::App& sub) {
  auto args = std::make_shared<TrainArgs>();
  sub.add_option("job", args->job, "job spec (YAML)")->required();
  sub.add_option("--set", args->overrides, "override a key: key.path=value (repeatable)");
  return std::function<int()>([args] {
    engine::JobSpec spec = engine::load_job_spec(args->job, args->overrides);
    std::unique_ptr<parallel::Mesh> mesh_ptr =
        engine::make_job_mesh(spec, parallel::detect_launch_env());
    parallel::Mesh& mesh = *mesh_ptr;
    error_rank() = mesh.rank();
    try {
      engine::Trainer trainer(spec, mesh);
      const int first = trainer.start_step();
      int steps = trainer.run();
      if (mesh.logs()) {
        if (steps == first)
          fmt::print("nothing to train: the checkpoint is at step {} of train.steps {}; run directory {}\n",
                     first, spec.train.steps, spec.run.dir);
        else
          fmt::print("trained to step {} ({} steps this run); run directory {}\n", steps,
                     steps - first, spec.run.dir);
      }
    } catch (const InputError& e) {
      // One line from one rank, then every rank goes down with exit code 2.
      std::fprintf(stderr, "trainer: error: %s\n", e.what());
      std::fflush(stderr);
      mesh.abort(2);
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainer: failed: %s\n", e.what());
      std::fflush(stderr);
      mesh.abort(1);
      return 1;
    }
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
