// BatchSchedule: the global batch of each optimizer step. Fixed at
// train.global_batch, or ramped up as Megatron's --rampup-batch-size: a step
// that starts after `consumed` training samples takes
//   start + floor(consumed / (samples / n)) * increment   while consumed <= samples,
//   global_batch                                            after,
// with n = (global_batch - start) / increment, in double as Megatron computes
// it, so both give the same batch at every step. The ramp is a function of the
// samples consumed, not of the step, so a resumed run (whose checkpoint records
// its samples) continues it where it was.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/config/job_spec.h"

namespace trainer::engine {

class BatchSchedule {
 public:
  explicit BatchSchedule(const TrainSpec& train);

  bool ramps() const { return ramp_.has_value(); }
  int global_batch() const { return global_; }  // the batch the ramp ends at

  // The global batch of a step that starts after `consumed` training samples.
  int batch_at(int64_t consumed) const;

  // The samples consumed after `steps` more steps from `consumed`. Runs of
  // equal batches are jumped over, so this costs one binary search per
  // increment the steps cross, not one per step.
  int64_t consumed_after(int64_t consumed, int64_t steps) const;

 private:
  int global_;
  std::optional<TrainSpec::Rampup> ramp_;
  double samples_per_increment_ = 0;
};

}  // namespace trainer::engine
