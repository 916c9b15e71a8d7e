// Device selection and the CUDA state's lifetime.
#include "engine/device.h"

#include "kernels/memory.h"

#ifdef TRAINER_CUDA
#include "kernels/cuda/cuda_state.h"
#endif

namespace trainer::engine {

Device resolve_device(const JobSpec& spec) {
  bool gpu = false;
#ifdef TRAINER_CUDA
  gpu = cuda::available();
#endif
  switch (spec.run.device) {
    case DeviceKind::cpu:
      return Device::cpu;
    case DeviceKind::auto_:
      return gpu ? Device::cuda : Device::cpu;
    case DeviceKind::cuda:
#ifndef TRAINER_CUDA
      throw InputError(spec.source_path +
                       ": run.device: cuda, but this build has no CUDA backend (configure with "
                       "-DTRAINER_CUDA=ON where nvcc exists, or use cpu)");
#endif
      TRAINER_INPUT_CHECK(gpu, "{}: run.device: cuda, but no GPU is visible (use cpu or auto)",
                          spec.source_path);
      return Device::cuda;
  }
  return Device::cpu;
}

DeviceContext::DeviceContext(Device device, int local_rank) {
  ctx_.device = device;
#ifdef TRAINER_CUDA
  if (device == Device::cuda) {
    ctx_.cuda = create_cuda_state(local_rank);
    // Every engine caller builds doc_start and positions with document_layout,
    // and moe_plan's experts come from the router's top-k.
    ctx_.cuda->check_index_operands = false;
  }
#endif
}

DeviceContext::~DeviceContext() {
#ifdef TRAINER_CUDA
  destroy_cuda_state(ctx_.cuda);
#endif
}

void use_fused_attention(Context& ctx, bool on) {
#ifdef TRAINER_CUDA
  if (ctx.device == Device::cuda && ctx.cuda) ctx.cuda->flash_attention = on;
#else
  (void)ctx;
  (void)on;
#endif
}

}  // namespace trainer::engine
