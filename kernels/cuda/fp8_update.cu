// Delayed-scaling update on the device (kernels/fp8_update.h): one thread per
// tensor walks its history column (neighbouring threads read neighbouring
// floats of a row), in the CPU op's order and rounding, so the bits match.
#include <cfloat>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/fp8_update.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void fp8_update_kernel(float* history, float* scale, float* scale_inv,
                                  const float* scaled_max, int64_t n, int64_t len) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float* col = history + i;
    const float last = col[0];
    float amax = 0.0f;
    for (int64_t r = 0; r < len; ++r) {
      const float a = r < len - 1 ? col[(r + 1) * n] : last;
      amax = fmaxf(amax, a);
      col[r * n] = r > 0 ? a : 0.0f;
    }
    float s = scale[i];
    if (isfinite(amax) && amax > 0.0f) s = scaled_max[i] / amax;  // IEEE division: no fast math here
    if (isinf(s)) s = FLT_MAX;
    scale[i] = s;
    scale_inv[i] = 1.0f / s;
  }
}

}  // namespace

void fp8_scaling_update(Context& ctx, Tensor history, Tensor scale, Tensor scale_inv,
                        Tensor scaled_max) {
  const char* op = "fp8_scaling_update";
  CudaState& st = state_of(ctx);
  const int64_t n = check_fp8_update_shapes(history, scale, scale_inv, scaled_max);
  const std::pair<const Tensor*, const char*> args[] = {
      {&history, "history"}, {&scale, "scale"}, {&scale_inv, "scale_inv"}, {&scaled_max, "scaled_max"}};
  for (auto [t, name] : args) {
    check_cuda(*t, op, name);
    check_dtype(*t, DType::f32, op, name);
  }
  if (n == 0) return;
  fp8_update_kernel<<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
      static_cast<float*>(history.data), static_cast<float*>(scale.data),
      static_cast<float*>(scale_inv.data), static_cast<const float*>(scaled_max.data), n,
      history.size(0));
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
