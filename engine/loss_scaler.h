// LossScaler: fp16 loss scaling, dynamic (halve and skip on overflow, grow after a
// run of good steps, within bounds) or static (a fixed scale, overflowed steps skipped).
//
// Use per optimizer step, in fp16 compute:
//   backward of (loss * scale())                 (scale the loss or the initial dlogits)
//   flag = 0; found_nonfinite(flag, g) for every gradient shard, after the gradient
//   reduction; max-reduce the flag over every rank (all ranks must agree on a skip)
//   if (scaler.update(flag != 0)) -> skip: zero the gradients, no optimizer step, log it
//   else: clip on unscaled gradients, AdamW with grad_scale = clip_factor * inv_scale
// inv_scale() must be read before update(), which may change the scale.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/config/job_spec.h"

namespace trainer::engine {

struct LossScalerOptions {
  bool dynamic = true;
  float initial_scale = 65536.0f;  // dynamic: the starting scale; static: the scale
  int growth_interval = 2000;      // good steps in a row before the scale grows (>= 1)
  float growth_factor = 2.0f;      // > 1
  float backoff_factor = 0.5f;     // in (0, 1)
  float min_scale = 1.0f;          // the scale never drops below (dynamic)
  float max_scale = 16777216.0f;   // 2^24; the scale never grows above (dynamic)
};

// The options of precision.loss_scale: "dynamic" starts at the spec's loss_scale
// (default 2^16); a number is a static scale.
LossScalerOptions loss_scaler_options(const PrecisionSpec& spec);

class LossScaler {
 public:
  // InputError naming precision.loss_scale when the options are out of range.
  explicit LossScaler(const LossScalerOptions& options = {});

  float scale() const { return scale_; }
  float inv_scale() const { return 1.0f / scale_; }
  bool dynamic() const { return options_.dynamic; }

  // Call once per optimizer step with whether any gradient held an inf or NaN;
  // returns true when that step must be skipped (found_nonfinite, in either mode).
  // Dynamic: overflow multiplies the scale by backoff_factor (not below min_scale)
  // and restarts the good-step count; growth_interval good steps in a row multiply
  // it by growth_factor (not above max_scale) and restart the count.
  bool update(bool found_nonfinite);

  int64_t good_steps() const { return good_steps_; }        // since the last change or skip
  int64_t skipped_steps() const { return skipped_steps_; }  // over the whole run
  int64_t consecutive_skips() const { return consecutive_skips_; }

  // Checkpointable state: scale, good-step count, skipped and consecutive-skip counts.
  // restore() takes the scale from the bytes only in dynamic mode (a static scale is
  // the job's); bad bytes: InputError naming `source`.
  std::string serialize() const;
  void restore(std::string_view bytes, const std::string& source);
  // The same state from checkpoint scalars; the scale is taken only in
  // dynamic mode, as restore() does. InputError naming `source` when invalid.
  void set_state(float scale, int64_t good, int64_t skipped, int64_t consecutive,
                 const std::string& source);

 private:
  LossScalerOptions options_;
  float scale_ = 1.0f;
  int64_t good_steps_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t consecutive_skips_ = 0;
};

}  // namespace trainer::engine
