// trainer train JOB.yaml [--set key.path=value ...]
#include <fmt/format.h>

#include "cmd/job_mesh.h"
#include "cmd/subcommand.h"
#include "engine/trainer.h"

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
    return run_on_job_mesh(args->job, args->overrides, {},
                           [](const engine::JobSpec& spec, parallel::Mesh& mesh) {
      engine::Trainer trainer(spec, mesh);
      const int first = trainer.start_step();
      int steps = trainer.run();
      if (!mesh.logs()) return;
      if (steps == first)
        fmt::print("nothing to train: the checkpoint is at step {} of train.steps {}; run directory {}\n",
                   first, spec.train.steps, spec.run.dir);
      else
        fmt::print("trained to step {} ({} steps this run); run directory {}\n", steps, steps - first,
                   spec.run.dir);
    });
  });
});

}  // namespace
}  // namespace trainer::cmd
