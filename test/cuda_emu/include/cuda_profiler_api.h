// The CUDA emulator's profiler control (cuda_profiler_api.h). Stricter than
// the driver, which ignores a start while capturing and a stop while not:
// here both fail (cudaErrorInvalidValue), since either means the caller lost
// track of its capture range. cuda_emu_profiler_starts() counts the starts
// that succeeded, for tests.
#pragma once

#include "cuda_runtime_api.h"

cudaError_t cudaProfilerStart();
cudaError_t cudaProfilerStop();
int cuda_emu_profiler_starts();
