// Nsight Systems' capture range: `nsys profile --capture-range=cudaProfilerApi`
// records only what runs between profiler_start() and profiler_stop(), so a
// long job can be profiled for a few chosen steps (log.profile_steps, driven
// by engine/profile_window.h). Both throw trainer::Error when the runtime
// refuses; without a profiler attached they do nothing.
#pragma once

namespace trainer::cuda {

void profiler_start();
// The caller waits for the device first, if the range is to hold every kernel
// queued before it (multi-GPU ranks poll: parallel::wait_for_device).
void profiler_stop();

}  // namespace trainer::cuda
