// The tiny training job the engine and checkpoint tests share: its JobSpec,
// silent trainer options on synthetic tokens, the losses of a run of steps,
// and a fresh per-process temp directory.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/trainer.h"

namespace trainer::testing {

// Two layers of width 32 on 16-token sequences, micro-batch 2 and global batch
// 4 (two accumulation steps on one rank): small enough to train in well under
// a second, big enough to exercise every layer kind of `family`.
inline engine::JobSpec tiny_job(engine::Family family, int steps) {
  using engine::Family;
  engine::JobSpec s;
  s.source_path = "test";
  s.run.device = engine::DeviceKind::cpu;
  s.model.family = family;
  s.model.n_layer = 2;
  s.model.d_model = 32;
  s.model.n_head = 4;
  s.model.n_kv_head = family == Family::llama ? 2 : 4;  // llama: grouped-query attention
  s.model.d_ff = 64;
  s.model.vocab_size = 200;
  s.model.max_seq_len = 16;
  s.model.tie_embeddings = family == Family::gpt2;
  s.data.train = {{"synthetic.bin", 1.0}};  // never opened: quiet_options() trains on synthetic tokens
  s.train.seq_len = 16;
  s.train.micro_batch = 2;
  s.train.global_batch = 4;
  s.train.steps = steps;
  s.train.eval_every = 0;
  s.optimizer.lr = 1e-3;
  s.optimizer.warmup_steps = 2;
  return s;
}

// Synthetic tokens, nothing written to run.dir, no log lines.
inline engine::TrainerOptions quiet_options() {
  engine::TrainerOptions o;
  o.synthetic_data = true;
  o.write_run_dir = false;
  o.log = nullptr;
  return o;
}

// The losses of steps first..last (inclusive) of t.
inline std::vector<double> train_losses(engine::Trainer& t, int first, int last) {
  std::vector<double> out;
  for (int s = first; s <= last; ++s) out.push_back(t.train_step(s).loss);
  return out;
}

// An empty path under the temp directory, unique to `name` and this process.
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("trainer_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}

}  // namespace trainer::testing
