// cudaProfilerStart / cudaProfilerStop (cuda_profiler_api.h, cudart).
#include "kernels/cuda/profiler.h"

#include <cuda_profiler_api.h>

#include "kernels/cuda/cuda_check.h"

namespace trainer::cuda {

void profiler_start() { CUDA_CHECK(cudaProfilerStart()); }

void profiler_stop() { CUDA_CHECK(cudaProfilerStop()); }

}  // namespace trainer::cuda
