// log.profile_steps / log.profile_ranks: a CUDA profiler capture range over
// chosen steps on chosen ranks, as Megatron-LM's --profile
// --profile-step-start/--profile-step-end --profile-ranks, for
//   nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop ...
// so a long job is profiled for a few steps, not its start-up and not hours.
// Each step is also an NVTX range ("step N", engine/trainer.cpp), around the
// layers', collectives' and optimizer's own ranges.
#pragma once

#include <cstdio>

#include "engine/config/job_spec.h"
#include "kernels/context.h"

namespace trainer::engine {

class ProfileWindow {
 public:
  // InputError naming log.profile_ranks when a listed rank is not in the
  // world. `out`: where this rank's lines go (null: stderr). `ctx`: the
  // rank's device, waited for before the range closes.
  ProfileWindow(const LogSpec& log, int world_rank, int world_size, Context& ctx, FILE* out);
  ~ProfileWindow();  // a range still open (the run stopped early or failed) is closed
  ProfileWindow(const ProfileWindow&) = delete;
  ProfileWindow& operator=(const ProfileWindow&) = delete;

  // Opens the range before the first step of [first, last] this run takes (a
  // resumed run may start inside the window).
  void before_step(int step);
  // Closes it after step `last`, or after the run's final step.
  void after_step(int step, bool final_step);
  bool capturing() const { return capturing_; }

 private:
  int first_ = 0, last_ = 0, rank_ = 0;
  bool mine_ = false;  // this rank is profiled, on a GPU
  bool capturing_ = false;
  bool polls_ = false;  // world > 1: wait by polling (a hung collective is the watchdog's)
  Context* ctx_ = nullptr;
  FILE* out_ = stderr;
};

}  // namespace trainer::engine
