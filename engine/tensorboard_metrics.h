// TensorBoardMetrics: the trainer's per-step and per-evaluation metrics as
// TensorBoard scalars (log.metrics: tensorboard), in <run.dir>/tensorboard/.
// Tags follow Megatron-LM's where it has the same quantity, so its dashboards
// carry over: lm loss, learning-rate, grad-norm, loss-scale, lm loss
// validation, load_balancing_loss (MoE), batch-size (train.rampup_batch_size),
// params-norm (log.params_norm). The rest are ours: tokens-per-sec,
// tflops (the whole job's; Megatron's "throughput" is per GPU), mfu,
// moe-imbalance, moe-dropped, skipped (fp16: 1 = the update was skipped).
#pragma once

#include <string>
#include <vector>

#include "engine/tensorboard/event_file.h"

namespace trainer::engine {

struct StepRecord;

// The scalars of one training step: the fields metrics.jsonl writes for it
// (a NaN grad norm, written there as null, is left out).
std::vector<tensorboard::Scalar> tensorboard_step_scalars(const StepRecord& r);

class TensorBoardMetrics {
 public:
  // A new event file in <run_dir>/tensorboard (a resumed run adds one).
  explicit TensorBoardMetrics(const std::string& run_dir);
  void log_step(const StepRecord& r);
  void log_eval(int step, double val_loss);
  const std::string& path() const { return file_.path(); }

 private:
  tensorboard::EventFileWriter file_;
};

}  // namespace trainer::engine
