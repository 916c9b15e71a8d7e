// trainer evaluate JOB.yaml [--set key.path=value ...]: the validation loss of
// the job's checkpoint (checkpoint.resume: auto takes the newest intact one,
// a path that one) on any mesh, writing nothing: Megatron's --skip-train.
#include <fmt/format.h>

#include <cmath>

#include "cmd/job_mesh.h"
#include "cmd/subcommand.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/trainer.h"
#include "kernels/error.h"

namespace trainer::cmd {
namespace {

struct EvaluateArgs {
  std::string job;
  std::vector<std::string> overrides;
};

Registrar reg("evaluate", "validation loss of a job's checkpoint (writes nothing)", [](CLI::App& sub) {
  auto args = std::make_shared<EvaluateArgs>();
  sub.add_option("job", args->job, "job spec (YAML): its model, data.val or data.split, "
                                   "train.eval_batches and checkpoint")->required();
  sub.add_option("--set", args->overrides, "override a key: key.path=value (repeatable)");
  return std::function<int()>([args] {
    auto adjust = [args](engine::JobSpec& spec) {
      TRAINER_INPUT_CHECK(!spec.data.val.empty() || spec.data.split_val() > 0,
                          "{}: data.val: required to evaluate (or a data.split giving validation a "
                          "share)", args->job);
      TRAINER_INPUT_CHECK(spec.checkpoint.resume != "never", "{}: checkpoint.resume is never: nothing "
                          "to evaluate (auto: the newest checkpoint; or a checkpoint's path)", args->job);
      // The validation data is opened for evaluations: one is asked for now.
      if (spec.train.eval_every == 0) spec.train.eval_every = spec.train.steps;
    };
    return run_on_job_mesh(args->job, args->overrides, adjust,
                           [args](const engine::JobSpec& spec, parallel::Mesh& mesh) {
      engine::TrainerOptions options;
      options.write_run_dir = false;
      options.resume_read_only = true;
      options.log = nullptr;
      engine::Trainer trainer(spec, mesh, options);
      TRAINER_INPUT_CHECK(trainer.start_step() > 0, "{}: no checkpoint to evaluate under {} "
                          "(checkpoint.resume {})", args->job, engine::checkpoint::checkpoint_root(spec),
                          spec.checkpoint.resume);
      const double loss = trainer.evaluate();
      if (mesh.logs())
        fmt::print("step {}: val loss {:.8f}, perplexity {:.4f}, over {} batches of {} x {} tokens; "
                   "checkpoint {}\n", trainer.start_step(), loss, std::exp(loss), spec.train.eval_batches,
                   spec.train.micro_batch, spec.train.seq_len, trainer.resumed_from());
    });
  });
});

}  // namespace
}  // namespace trainer::cmd
