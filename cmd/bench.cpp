// trainer bench JOB.yaml [--steps N] [--set ...]: times training steps of the
// job's model on synthetic tokens (the step's cost does not depend on token
// values) and reports tokens/s, achieved FLOP/s and the share of the peak
// measured in the same process (CPU: best large GEMM through the linear op).
// Step 1 is the warm-up; --set log.profile_steps=[3,4] puts a CUDA profiler
// range around timed steps (nsys profile --capture-range=cudaProfilerApi).
#include <fmt/format.h>

#include <algorithm>

#include "cmd/input_error_report.h"
#include "cmd/subcommand.h"
#include "engine/config/job_spec.h"
#include "engine/device.h"
#include "engine/mesh_from_spec.h"
#include "parallel/launch_env.h"
#include "parallel/mesh.h"
#include "engine/peak_flops.h"
#include "engine/trainer.h"

namespace trainer::cmd {
namespace {

struct BenchArgs {
  std::string job;
  std::vector<std::string> overrides;
  int steps = 5;
};

Registrar reg("bench", "benchmark training steps: tokens/s, FLOP/s, MFU", [](CLI::App& sub) {
  auto args = std::make_shared<BenchArgs>();
  sub.add_option("job", args->job, "job spec (YAML)")->required();
  sub.add_option("--set", args->overrides, "override a key: key.path=value (repeatable)");
  sub.add_option("--steps", args->steps, "timed steps (after one warm-up step)")
      ->check(whole_number(1, 1 << 20));
  return std::function<int()>([args] {
    InputErrorReport errors(parallel::detect_launch_env());
    engine::JobSpec spec;
    std::unique_ptr<parallel::Mesh> mesh_ptr;
    std::unique_ptr<engine::Trainer> trainer_ptr;
    try {
      spec = engine::load_job_spec(args->job, args->overrides);
      errors.set_watchdog_timeout(spec.parallel.timeout_s);
      // The spec was checked against its own train.steps; the bench runs its own.
      TRAINER_INPUT_CHECK(spec.log.profile_first <= args->steps + 1,
                          "log.profile_steps: the first step {} is after the bench's last, {} (the "
                          "warm-up step 1, then --steps {})", spec.log.profile_first,
                          args->steps + 1, args->steps);
      spec.train.steps = args->steps + 1;
      spec.train.eval_every = 0;
      // Timed at the batch the job trains at once its ramp is over.
      spec.train.rampup_batch_size.reset();
      engine::TrainerOptions options;
      options.synthetic_data = true;
      options.write_run_dir = false;
      options.log = nullptr;
      // Under mpirun/srun the same mesh as `train` (data-parallel scaling figures).
      mesh_ptr = engine::make_job_mesh(spec, errors.env());
      errors.set_mesh(mesh_ptr.get());
      trainer_ptr = std::make_unique<engine::Trainer>(spec, *mesh_ptr, options);
    } catch (const InputError& e) {
      return errors.report(e.what());
    }
    parallel::Mesh& mesh = *mesh_ptr;
    engine::Trainer& trainer = *trainer_ptr;
    double peak = engine::peak_flops(trainer.context(), spec.precision.compute, 2048);
    trainer.train_step(1);  // warm-up: first touch of every arena page
    double seconds = 0, tokens = 0, flops = 0, memory = 0;
    for (int s = 2; s <= args->steps + 1; ++s) {
      engine::StepRecord r = trainer.train_step(s);
      memory = std::max(memory, r.memory_bytes);
      seconds += r.seconds;
      tokens += r.tokens_per_s * r.seconds;
      flops += r.tflops * 1e12 * r.seconds;
    }
    double achieved = flops / seconds;
    if (!mesh.logs()) return 0;
    fmt::print("bench {}: {} steps of {} tokens on {}, {}\n", spec.source_path, args->steps,
               spec.train.global_batch * spec.train.seq_len,
               device_name(trainer.context().device), mesh.shape().str());
    peak *= mesh.shape().world;  // every rank measured the same GEMM
    fmt::print("  peak (measured GEMM)  {:10.1f} GFLOP/s\n", peak / 1e9);
    fmt::print("  step time             {:10.1f} ms\n", seconds / args->steps * 1e3);
    fmt::print("  throughput            {:10.0f} tokens/s\n", tokens / seconds);
    fmt::print("  achieved              {:10.1f} GFLOP/s\n", achieved / 1e9);
    fmt::print("  of peak (MFU)         {:10.1f} %\n", 100.0 * achieved / peak);
    // Rank 0's, beside what the plan allocates (on a GPU the difference is the
    // CUDA context, NCCL's and cuBLASLt's own buffers).
    fmt::print("  memory in use         {:>10}   (rank 0; the plan allocates {})\n",
               engine::format_bytes(memory), engine::format_bytes(double(trainer.plan().total())));
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
