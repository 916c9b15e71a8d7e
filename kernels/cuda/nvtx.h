// NvtxRange: an RAII NVTX range (push on construction, pop on destruction) so
// Nsight Systems shows layers, collectives and the optimizer step. Header-only
// nvtx3 from the toolkit; in a build without CUDA it compiles to nothing.
#pragma once

#if defined(TRAINER_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define TRAINER_HAS_NVTX 1
#endif

namespace trainer::cuda {

class NvtxRange {
 public:
  // `name` must outlive the call only (NVTX copies it).
  explicit NvtxRange(const char* name) {
#ifdef TRAINER_HAS_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~NvtxRange() {
#ifdef TRAINER_HAS_NVTX
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace trainer::cuda
