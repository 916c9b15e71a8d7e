// The profiler capture range over log.profile_steps.
#include "engine/profile_window.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/error.h"
#include "kernels/memory.h"
#include "parallel/stream_order.h"

#ifdef TRAINER_CUDA
#include "kernels/cuda/profiler.h"
#endif

namespace trainer::engine {

ProfileWindow::ProfileWindow(const LogSpec& log, int world_rank, int world_size, Context& ctx,
                             FILE* out)
    : first_(log.profile_first), last_(log.profile_last), rank_(world_rank), polls_(world_size > 1),
      ctx_(&ctx), out_(out ? out : stderr) {
  if (first_ == 0) return;
  for (int r : log.profile_ranks)
    TRAINER_INPUT_CHECK(r < world_size, "log.profile_ranks: rank {} is not in this run's world of {} "
                        "rank{}", r, world_size, world_size == 1 ? "" : "s");
  const auto& ranks = log.profile_ranks;
  if (std::find(ranks.begin(), ranks.end(), world_rank) == ranks.end()) return;
  if (ctx.device != Device::cuda) {
    fmt::print(out_, "log.profile_steps: rank {} runs on the CPU: no CUDA profiler range is opened "
               "(the steps' NVTX ranges are the GPU's too)\n", rank_);
    return;
  }
  mine_ = true;
}

ProfileWindow::~ProfileWindow() {
  if (!capturing_) return;
#ifdef TRAINER_CUDA
  try {
    cuda::profiler_stop();
  } catch (const std::exception&) {
    // Already failing: the range ends with the process.
  }
#endif
}

void ProfileWindow::before_step(int step) {
  if (!mine_ || capturing_ || step < first_ || step > last_) return;
#ifdef TRAINER_CUDA
  cuda::profiler_start();
#endif
  capturing_ = true;
  fmt::print(out_, "profiling steps {}-{} on rank {}: cudaProfilerStart before step {}\n", first_,
             last_, rank_, step);
  std::fflush(out_);
}

void ProfileWindow::after_step(int step, bool final_step) {
  if (!capturing_ || (step < last_ && !final_step)) return;
  // The range holds the step's kernels: wait for them first.
  if (polls_)
    parallel::wait_for_device(*ctx_);
  else
    synchronize_device(*ctx_);
#ifdef TRAINER_CUDA
  cuda::profiler_stop();
#endif
  capturing_ = false;
  fmt::print(out_, "profiling on rank {}: cudaProfilerStop after step {}\n", rank_, step);
  std::fflush(out_);
}

}  // namespace trainer::engine
