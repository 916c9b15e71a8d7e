// trainer train JOB.yaml [--set key.path=value ...]
#include <fmt/format.h>

#include "cmd/subcommand.h"
#include "engine/config/job_spec.h"
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
    engine::JobSpec spec = engine::load_job_spec(args->job, args->overrides);
    engine::Trainer trainer(spec);
    int steps = trainer.run();
    fmt::print("trained {} steps; run directory {}\n", steps, spec.run.dir);
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
