// CPU AdamW over a flat fp32 range; bias corrections computed once in double.
#include "kernels/adamw.h"

#include <cmath>

#include "kernels/cpu/cpu_common.h"

namespace trainer::cpu {

namespace {

// sqrt(x) for finite x >= 0 as x * rsqrt(x), rsqrt from the bit-trick guess
// and three Newton steps (relative error a few ulp). libm's sqrtf keeps the loop
// scalar: it must set errno for x < 0, and the project builds without -fno-math-errno.
TRAINER_CPU_INLINE float sqrt_nonneg(float x) {
  float y = std::bit_cast<float>(0x5f375a86 - (std::bit_cast<int32_t>(x) >> 1));
  y = y * (1.5f - 0.5f * x * y * y);
  y = y * (1.5f - 0.5f * x * y * y);
  y = y * (1.5f - 0.5f * x * y * y);
  return x * y;
}

TRAINER_CPU_CLONES void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, int64_t n, float b1, float b2, float lr, float eps,
                 float wd, float grad_scale, float m_corr, float v_corr) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi * m_corr / (sqrt_nonneg(vi * v_corr) + eps) + wd * p[i]);
  }
}

}  // namespace

void adamw_update(Context& ctx, Tensor param, Tensor grad, Tensor m, Tensor v,
                  const AdamWArgs& args) {
  const char* op = "adamw_update";
  const int64_t n = param.numel();
  for (const Tensor* t : {&grad, &m, &v})
    TRAINER_CHECK(t->numel() == n, "{}: {} and {} differ in numel", op, param.str(), t->str());
  TRAINER_CHECK(args.step >= 1, "{}: step {} must be >= 1 (1-based)", op, args.step);
  float* p = f32(param, op, "param");
  const float* g = f32(grad, op, "grad");
  float* mp = f32(m, op, "m");
  float* vp = f32(v, op, "v");
  const double t = static_cast<double>(args.step);
  const float m_corr = static_cast<float>(1.0 / (1.0 - std::pow(double(args.beta1), t)));
  const float v_corr = static_cast<float>(1.0 / (1.0 - std::pow(double(args.beta2), t)));
#pragma omp parallel
  {
    int64_t b, e;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    if (e > b)
      adamw_range(p + b, g + b, mp + b, vp + b, e - b, args.beta1, args.beta2, args.lr, args.eps,
                  args.weight_decay, args.grad_scale, m_corr, v_corr);
  }
}

}  // namespace trainer::cpu
