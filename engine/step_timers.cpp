#include "engine/step_timers.h"

#include "kernels/memory.h"
#include "parallel/communicator.h"

namespace trainer::engine {

const char* step_phase_name(StepPhase phase) {
  switch (phase) {
    case StepPhase::data: return "data";
    case StepPhase::forward_backward: return "forward-backward";
    case StepPhase::grad_sync: return "grad-sync";
    case StepPhase::optimizer: return "optimizer";
    case StepPhase::count: break;
  }
  return "?";
}

StepTimers::StepTimers(bool on, Context& ctx, Clock clock) : on_(on), ctx_(ctx), clock_(std::move(clock)) {
  if (!clock_)
    clock_ = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
}

void StepTimers::begin_step() {
  if (!on_) return;
  synchronize_device(ctx_);
  seconds_.fill(0);
  last_ = clock_();
}

void StepTimers::mark(StepPhase finished) {
  if (!on_) return;
  synchronize_device(ctx_);
  const double now = clock_();
  seconds_[static_cast<int>(finished)] += now - last_;
  last_ = now;
}

StepTimes StepTimers::spread(parallel::Communicator& group) const {
  constexpr int n = kStepPhases;
  // max of t and of -t: every phase's max and min in one call.
  std::array<double, 2 * n> extremes;
  for (int p = 0; p < n; ++p) extremes[p] = seconds_[p], extremes[n + p] = -seconds_[p];
  group.all_reduce(Tensor(extremes.data(), {2 * n}, DType::f64), parallel::ReduceOp::max);
  // Then the ranks that hold them (the highest where several tie).
  std::array<double, 2 * n> ranks;
  for (int p = 0; p < n; ++p) {
    ranks[p] = seconds_[p] == extremes[p] ? group.rank() : -1;
    ranks[n + p] = -seconds_[p] == extremes[n + p] ? group.rank() : -1;
  }
  group.all_reduce(Tensor(ranks.data(), {2 * n}, DType::f64), parallel::ReduceOp::max);
  StepTimes out;
  for (int p = 0; p < n; ++p)
    out[p] = {-extremes[n + p] * 1e3, extremes[p] * 1e3, static_cast<int>(ranks[n + p]),
              static_cast<int>(ranks[p])};
  return out;
}

}  // namespace trainer::engine
