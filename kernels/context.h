// Context: what every op needs besides its tensors. On the CPU that is the
// thread count; on CUDA it carries the stream, cuBLASLt handle and workspace
// (an opaque pointer owned by kernels/cuda so CPU builds never see CUDA types).
#pragma once

#include "kernels/tensor.h"

namespace trainer {

struct CudaState;  // defined in kernels/cuda/cuda_state.h

struct Context {
  Device device = Device::cpu;
  CudaState* cuda = nullptr;
};

}  // namespace trainer
