// Fused AdamW over one flat fp32 range (kernels/adamw.h): one read and one write
// of param, m and v per element. Bias corrections are computed once on the host.
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/cuda/common.cuh"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bias_correction1, float bias_correction2) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bias_correction1;
    const float v_hat = vi / bias_correction2;
    const float p = param[i];
    param[i] = p - lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
  }
}

}  // namespace

void adamw_update(Context& ctx, Tensor param, Tensor grad, Tensor m, Tensor v,
                  const AdamWArgs& args) {
  const char* op = "adamw_update";
  CudaState& st = state_of(ctx);
  const int64_t n = param.numel();
  for (const auto& [t, name] : {std::pair{&param, "param"}, {&grad, "grad"}, {&m, "m"}, {&v, "v"}}) {
    check_cuda(*t, op, name);
    check_dtype(*t, DType::f32, op, name);
    TRAINER_CHECK(t->numel() == n, "{}: {} {} vs param {}", op, name, t->str(), param.str());
  }
  TRAINER_CHECK(args.step >= 1, "{}: step {} must be >= 1", op, args.step);
  if (n == 0) return;
  const double t = static_cast<double>(args.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta2), t));
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
      static_cast<float*>(param.data), static_cast<const float*>(grad.data),
      static_cast<float*>(m.data), static_cast<float*>(v.data), n, args.lr, args.beta1, args.beta2,
      args.eps, args.weight_decay, args.grad_scale, bc1, bc2);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
