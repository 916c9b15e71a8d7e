// What a resume compares between the job a checkpoint was saved by and the
// job resuming it: the model must be the same function (a shape check alone
// lets a 2-layer checkpoint load as a 1-layer model, or a changed n_head,
// norm_eps or top_k through), while the data stream may change (a new blend
// or batch size for the next phase is normal) and is reported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/batch_schedule.h"
#include "engine/config/job_spec.h"

namespace trainer::engine::checkpoint {

// "model.n_layer is 2 in the checkpoint, 1 in this job", one entry per key
// that changes what the model computes. init_std and init_from (only read
// before step 1), llama's max_seq_len (a bound on seq_len, no parameter) and
// the MoE balancing coefficients and capacity (training settings) may differ.
// With `tensors_only`, just the keys that change a tensor's name or shape:
// not rope_theta, rope_scaling, norm_eps or moe.top_k (what a new run started
// from the checkpoint's weights, model.init_from, may change).
std::vector<std::string> model_differences(const ModelSpec& saved, const ModelSpec& job,
                                           bool tensors_only = false);

// The data stream's changes, each a note for the log: the global batch and its
// ramp (the run continues at the checkpoint's sample count, not at step x batch),
// seq_len, seed, shuffle, and the training sources.
std::vector<std::string> data_stream_changes(const JobSpec& saved, const JobSpec& job);

// Training samples consumed after `step`, for a run that resumed after
// `resumed_step` with `resumed_samples` consumed (0 and 0 when it started
// afresh) and has taken its schedule's global batches since: where the data
// stream continues, and what a checkpoint of that step records.
inline int64_t samples_consumed_after(int step, int resumed_step, int64_t resumed_samples,
                                      const BatchSchedule& batches) {
  return batches.consumed_after(resumed_samples, step - resumed_step);
}

}  // namespace trainer::engine::checkpoint
