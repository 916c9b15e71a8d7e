// trainer train JOB.yaml [--set key.path=value ...]
#include <fmt/format.h>

#include <cstdio>

#include "cmd/input_error_report.h"
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
    InputErrorReport errors(parallel::detect_launch_env());
    std::unique_ptr<parallel::Mesh> mesh;
    try {
      engine::JobSpec spec = engine::load_job_spec(args->job, args->overrides);
      errors.set_watchdog_timeout(spec.parallel.timeout_s);
      mesh = engine::make_job_mesh(spec, errors.env());
      errors.set_mesh(mesh.get());
      error_rank() = mesh->rank();
      engine::Trainer trainer(spec, *mesh);
      const int first = trainer.start_step();
      int steps = trainer.run();
      if (mesh->logs()) {
        if (steps == first)
          fmt::print("nothing to train: the checkpoint is at step {} of train.steps {}; run directory {}\n",
                     first, spec.train.steps, spec.run.dir);
        else
          fmt::print("trained to step {} ({} steps this run); run directory {}\n", steps,
                     steps - first, spec.run.dir);
      }
    } catch (const InputError& e) {
      return errors.report(e.what());
    } catch (const std::exception& e) {
      if (!mesh) throw;  // before the mesh: main prints it
      std::fprintf(stderr, "trainer: failed: %s\n", e.what());
      std::fflush(stderr);
      mesh->abort(1);
      return 1;
    }
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
