// What the emulator's launcher (scheduler.cpp) asks of its runtime (runtime.cpp).
#pragma once

#include "cuda_runtime.h"

namespace cuda_emu {

// The driver's checks of a launch: block and grid sizes, dynamic shared memory
// against the kernel's opted-in maximum, a live stream.
cudaError_t check_launch(const void* kernel, const LaunchConfig& cfg);
void set_last_error(cudaError_t err);

}  // namespace cuda_emu
