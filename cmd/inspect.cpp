// trainer inspect RUN_DIR_OR_CHECKPOINT: what a checkpoint holds and whether it
// is intact, before a thousand GPUs are started on it. A step directory is
// verified in full (every file's size and XXH3 against manifest.json, every
// shard header) and summarised: step, data position, the mesh that saved it,
// the model, its parameter count and scalars. A run or checkpoint directory
// lists every step directory it keeps, each verified, and names the one
// `checkpoint.resume: auto` would take. Exit 2 with one line when the named
// checkpoint (or every one of a run) is damaged.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cmd/subcommand.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/shard_contents.h"
#include "engine/memory_plan.h"
#include "engine/model_from_spec.h"
#include "kernels/error.h"

namespace trainer::cmd {
namespace {

namespace fs = std::filesystem;
using engine::checkpoint::CheckpointReader;

// The step directory's files (all verified against the manifest): count, bytes.
std::pair<size_t, double> files_in(const std::string& step_dir) {
  size_t files = 0;
  double bytes = 0;
  for (const auto& e : fs::directory_iterator(step_dir))
    if (e.is_regular_file()) {
      ++files;
      bytes += static_cast<double>(e.file_size());
    }
  return {files, bytes};
}

void describe_verified(const std::string& step_dir) {
  const CheckpointReader reader(step_dir);
  const engine::Json& meta = reader.metadata();
  const auto [files, bytes] = files_in(step_dir);
  fmt::print("checkpoint {}: intact ({} files, {}, every checksum verified)\n", step_dir, files,
             engine::format_bytes(bytes));
  const engine::JobSpec job = reader.job_spec();
  const engine::Json* pos = meta.find("data_position");
  const engine::Json* consumed = pos ? pos->find("samples_consumed") : nullptr;
  fmt::print("  step {}, {} training samples consumed (global batch {}, seq_len {}), seed {}\n",
             reader.step(), consumed ? std::to_string(consumed->as_int()) : std::string("unknown"),
             job.train.global_batch, job.train.seq_len, job.run.seed);
  const engine::Json& mesh = meta.at("mesh");
  fmt::print("  saved on world {}: tp {} x cp {} x dp {} x pp {} (ep {}), zero {}\n",
             mesh.at("world").as_int(), mesh.at("tp").as_int(), mesh.at("cp").as_int(),
             mesh.at("dp").as_int(), mesh.at("pp").as_int(), mesh.at("ep").as_int(),
             mesh.at("zero").as_int());
  const engine::ModelSpec& m = job.model;
  double params = 0;
  size_t tensors = 0;
  for (const std::string& name : reader.names()) {
    if (!engine::checkpoint::is_parameter_tensor(name)) continue;
    const auto& slice = reader.any_slice(name);
    double n = 1;
    for (int64_t d : slice.global_shape) n *= static_cast<double>(d);
    params += n;
    ++tensors;
  }
  fmt::print("  model: {}, {} layers, d_model {}, {} heads ({} kv){}, d_ff {}, vocab {}{}; {:.0f} "
             "parameters in {} tensors (padded vocabulary rows included)\n",
             engine::to_string(m.family), m.n_layer, m.d_model, m.n_head,
             m.n_kv_head > 0 ? m.n_kv_head : m.n_head, engine::attention_options(m), m.d_ff, m.vocab_size,
             m.moe.enabled ? ", MoE " + engine::moe_options(m.moe) : std::string(),
             params, tensors);
  std::string scalars;
  for (const auto& [key, value] : meta.at("scalars").members())
    scalars += fmt::format("{}{} {}", scalars.empty() ? "" : ", ", key, value.as_number());
  fmt::print("  precision {}{}\n", engine::to_string(job.precision.compute),
             scalars.empty() ? std::string() : "; " + scalars);
}

// A metadata.json edited by hand (and its manifest with it) may lack a field
// or hold the wrong type: the file and the problem, as bad input.
void describe(const std::string& step_dir) {
  try {
    describe_verified(step_dir);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(fmt::format("{}: {}", (fs::path(step_dir) / "metadata.json").string(), e.what()));
  }
}

// A run or checkpoint directory: its step directories, newest first.
int list(const std::string& path) {
  // The roots may name one folder twice (a run directory whose job.yaml's
  // checkpoint.dir is its own checkpoints/).
  std::set<std::string> seen;
  std::vector<std::pair<int, std::string>> steps;
  for (const std::string& root : engine::checkpoint::checkpoint_roots(path))
    for (const auto& [step, dir] : engine::checkpoint::step_dirs(root)) {
      std::error_code ec;
      if (seen.insert(fs::weakly_canonical(dir, ec).string()).second) steps.emplace_back(step, dir);
    }
  TRAINER_INPUT_CHECK(!steps.empty(),
                      "{}: no checkpoint found (expected step_*/ with manifest.json, or "
                      "checkpoints/ below a run directory)", path);
  std::sort(steps.rbegin(), steps.rend());
  std::string resumable;
  for (const auto& [step, dir] : steps) {
    try {
      engine::checkpoint::verify_checkpoint(dir);
      fmt::print("{}: intact\n", dir);
      if (resumable.empty()) resumable = dir;
    } catch (const InputError& e) {
      fmt::print("{}: DAMAGED: {}\n", dir, e.what());
    }
  }
  TRAINER_INPUT_CHECK(!resumable.empty(), "{}: none of its {} checkpoints is intact", path,
                      steps.size());
  fmt::print("checkpoint.resume: auto resumes {}\n", resumable);
  describe(resumable);
  return 0;
}

Registrar reg("inspect", "verify a checkpoint (every checksum) and say what it holds",
              [](CLI::App& sub) {
  auto source = std::make_shared<std::string>();
  sub.add_option("source", *source,
                 "a step_* directory, or a run or checkpoint directory (then every checkpoint "
                 "it keeps)")
      ->required();
  return std::function<int()>([source] {
    TRAINER_INPUT_CHECK(fs::exists(*source), "{}: no such checkpoint", *source);
    if (!engine::checkpoint::is_step_dir(*source)) return list(*source);
    engine::checkpoint::verify_checkpoint(*source);
    describe(*source);
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
