// See batch_schedule.h.
#include "engine/batch_schedule.h"

#include <algorithm>

#include "kernels/error.h"

namespace trainer::engine {

BatchSchedule::BatchSchedule(const TrainSpec& train)
    : global_(train.global_batch), ramp_(train.rampup_batch_size) {
  if (!ramp_) return;
  // The spec check refused the rest; these would divide by zero below.
  TRAINER_CHECK(ramp_->start < global_ && ramp_->increment > 0 && ramp_->samples > 0 &&
                    (global_ - ramp_->start) % ramp_->increment == 0,
                "batch schedule: train.rampup_batch_size [{}, {}, {}] does not ramp up to {}",
                ramp_->start, ramp_->increment, ramp_->samples, global_);
  const int increments = (global_ - ramp_->start) / ramp_->increment;
  samples_per_increment_ = static_cast<double>(ramp_->samples) / increments;
}

int BatchSchedule::batch_at(int64_t consumed) const {
  if (!ramp_ || consumed > ramp_->samples) return global_;
  const int64_t steps = static_cast<int64_t>(static_cast<double>(consumed) / samples_per_increment_);
  return static_cast<int>(std::min<int64_t>(global_, ramp_->start + steps * ramp_->increment));
}

int64_t BatchSchedule::consumed_after(int64_t consumed, int64_t steps) const {
  while (steps > 0 && ramp_ && consumed <= ramp_->samples) {
    const int g = batch_at(consumed);
    // The steps i = 0, 1, ... after this one take g while consumed + i * g is
    // still in the ramp and gives g (batch_at never decreases): the last such i.
    auto same = [&](int64_t i) {
      const int64_t c = consumed + i * g;
      return c <= ramp_->samples && batch_at(c) == g;
    };
    int64_t lo = 0, hi = (ramp_->samples - consumed) / g;  // same(lo) holds
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (same(mid)) lo = mid;
      else hi = mid - 1;
    }
    const int64_t run = std::min(steps, lo + 1);
    consumed += run * g;
    steps -= run;
  }
  return consumed + steps * global_;
}

}  // namespace trainer::engine
