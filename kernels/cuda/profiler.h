// Nsight Systems' capture range: `nsys profile --capture-range=cudaProfilerApi`
// records only what runs between profiler_start() and profiler_stop(), so a
// long job can be profiled for a few chosen steps (log.profile_steps, driven
// by engine/profile_window.h). Both throw trainer::Error when the runtime
// refuses; without a profiler attached they do nothing.
#pragma once

namespace trainer::cuda {

void profiler_start();
// Waits for the device first, so the range holds every kernel queued before it.
void profiler_stop();

}  // namespace trainer::cuda
