// See single_rank.h.
#include "engine/single_rank.h"

namespace trainer::engine {

JobSpec single_rank_spec(JobSpec spec, int seq_len) {
  spec.run.device = DeviceKind::cpu;
  spec.parallel = ParallelSpec{};
  spec.parallel.dp = 1;
  spec.parallel.zero = 0;
  spec.precision = PrecisionSpec{};
  spec.train.seq_len = seq_len;
  spec.train.micro_batch = 1;
  spec.train.global_batch = 1;
  spec.train.rampup_batch_size.reset();
  spec.train.eval_every = 0;
  spec.model.init_from.clear();
  spec.checkpoint.resume = "never";
  return spec;
}

std::unique_ptr<Trainer> single_rank_trainer(JobSpec spec, int seq_len) {
  TrainerOptions quiet;
  quiet.synthetic_data = true;
  quiet.write_run_dir = false;
  quiet.log = nullptr;
  return std::make_unique<Trainer>(single_rank_spec(std::move(spec), seq_len), quiet);
}

}  // namespace trainer::engine
