// run.device -> the Device a rank computes on, and the op Context for it
// (on CUDA: the GPU picked by local rank, its streams and cuBLASLt handle).
#pragma once

#include "engine/config/job_spec.h"
#include "kernels/context.h"

namespace trainer::engine {

// cpu -> cpu; cuda -> cuda, refused (InputError) when this build has no CUDA
// backend or no GPU is visible; auto -> cuda when a GPU is visible, else cpu.
Device resolve_device(const JobSpec& spec);

// Owns the CUDA state behind a Context; a CPU context owns nothing.
class DeviceContext {
 public:
  DeviceContext(Device device, int local_rank);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  Context& context() { return ctx_; }

 private:
  Context ctx_;
};

// run.attention on a CUDA context: false sends every attention down the
// unfused path (CudaState::flash_attention); a CPU context has one path.
void use_fused_attention(Context& ctx, bool on);

}  // namespace trainer::engine
