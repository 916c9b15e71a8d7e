// CPU GELU (tanh approximation), forward and backward, with a vectorisable tanh.
#include "kernels/gelu.h"

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;

// tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits at +-inf, error ~1e-7 absolute.
TRAINER_CPU_INLINE float tanh_approx(float u) { return 1.0f - 2.0f / (exp_approx(2.0f * u) + 1.0f); }

TRAINER_CPU_CLONES void gelu_forward_range(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCoeff * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanh_approx(u));
  }
}

TRAINER_CPU_CLONES void gelu_backward_range(float* dinp, const float* dout, const float* inp,
                                            int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCoeff * x * x * x);
    const float th = tanh_approx(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * x * x);
    dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
  }
}

}  // namespace

void gelu_forward(Context& ctx, Tensor out, Tensor inp) {
  TRAINER_CHECK(out.numel() == inp.numel(), "gelu_forward: out {} vs inp {}", out.str(), inp.str());
  Staging st("gelu_forward");
  float* o = st.out(out, "out");
  const float* x = st.in(inp, "inp");
  const int64_t n = inp.numel();
#pragma omp parallel
  {
    int64_t b, e;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    if (e > b) gelu_forward_range(o + b, x + b, e - b);
  }
  st.commit();
}

void gelu_backward(Context& ctx, Tensor dinp, Tensor dout, Tensor inp) {
  TRAINER_CHECK(dinp.numel() == inp.numel() && dout.numel() == inp.numel(),
                "gelu_backward: dinp {}, dout {}, inp {} differ", dinp.str(), dout.str(), inp.str());
  Staging st("gelu_backward");
  float* dx = st.out(dinp, "dinp");
  const float* dy = st.in(dout, "dout");
  const float* x = st.in(inp, "inp");
  const int64_t n = inp.numel();
#pragma omp parallel
  {
    int64_t b, e;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    if (e > b) gelu_backward_range(dx + b, dy + b, x + b, e - b);
  }
  st.commit();
}

}  // namespace trainer::cpu
