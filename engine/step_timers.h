// log.timers: where each step's time goes on every rank, and which rank a
// slow phase waits on (Megatron-LM's --timing-log-level 1 with
// --timing-log-option minmax). A straggler shows as the rank with the longest
// forward-backward and the shortest gradient sync: the others wait for it there.
#pragma once

#include <array>
#include <chrono>
#include <functional>

#include "kernels/context.h"

namespace trainer::parallel {
class Communicator;
}

namespace trainer::engine {

enum class StepPhase {
  data,              // reading and uploading the step's samples (and eod_mask_loss's count)
  forward_backward,  // the micro-batches' forward and backward (a pipeline's sends and receives too)
  grad_sync,         // gradient reduction over dp (ZeRO's reduce-scatters), tied tables, the loss
  optimizer,         // gradient norm, clipping, the update, ZeRO's gathers
  count
};
constexpr int kStepPhases = static_cast<int>(StepPhase::count);
// The names the log line, metrics.jsonl and TensorBoard use.
const char* step_phase_name(StepPhase phase);

// One phase's times over the ranks of a group.
struct PhaseSpread {
  double min_ms = 0, max_ms = 0;
  int min_rank = 0, max_rank = 0;  // the highest such rank where several tie
};
using StepTimes = std::array<PhaseSpread, kStepPhases>;

// Per-step phase clocks. Off, every call is a no-op. On a GPU each mark first
// waits for the device (as Megatron's timers do): queued work belongs to the
// phase that queued it, at the cost of the overlap between phases.
class StepTimers {
 public:
  using Clock = std::function<double()>;  // seconds; a steady clock unless a test gives one
  StepTimers(bool on, Context& ctx, Clock clock = {});

  bool on() const { return on_; }
  // Starts a step: every phase at zero, the clock at now.
  void begin_step();
  // The time since the last mark (or begin_step) goes to `finished`.
  void mark(StepPhase finished);
  // This rank's times this step, in seconds.
  const std::array<double, kStepPhases>& local() const { return seconds_; }
  // Min and max over `group` with their ranks: two all-reduces of 2 x phases
  // doubles, every rank of the group calling.
  StepTimes spread(parallel::Communicator& group) const;

 private:
  bool on_;
  Context& ctx_;
  Clock clock_;
  double last_ = 0;
  std::array<double, kStepPhases> seconds_{};
};

}  // namespace trainer::engine
