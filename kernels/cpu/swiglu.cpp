// CPU SwiGLU gate: out = silu(gate) * up and its backward.
#include "kernels/swiglu.h"

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

TRAINER_CPU_CLONES void swiglu_forward_range(float* out, const float* gate, const float* up,
                                             int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + exp_approx(-g)) * up[i];
  }
}

// Every input element is read before the outputs are written, so any output
// may alias any input.
TRAINER_CPU_CLONES void swiglu_backward_range(float* dgate, float* dup, const float* dout,
                                              const float* gate, const float* up, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], dy = dout[i];
    const float s = 1.0f / (1.0f + exp_approx(-g));
    dgate[i] = dy * u * s * (1.0f + g * (1.0f - s));
    dup[i] = dy * g * s;
  }
}

}  // namespace

void swiglu_forward(Context& ctx, Tensor out, Tensor gate, Tensor up) {
  const char* op = "swiglu_forward";
  const int64_t N = gate.size(0), F = gate.size(-1);
  check_shape(gate, {N, F}, "swiglu_forward gate");
  check_shape(up, {N, F}, "swiglu_forward up");
  check_shape(out, {N, F}, "swiglu_forward out");
  Staging st(op);
  float* o = st.out(out, "out");
  const float* g = st.in(gate, "gate");
  const float* u = st.in(up, "up");
  const int64_t n = N * F;
#pragma omp parallel
  {
    int64_t b, e;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    if (e > b) swiglu_forward_range(o + b, g + b, u + b, e - b);
  }
  st.commit();
}

void swiglu_backward(Context& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate,
                     Tensor up) {
  const char* op = "swiglu_backward";
  const int64_t N = gate.size(0), F = gate.size(-1);
  check_shape(gate, {N, F}, "swiglu_backward gate");
  check_shape(up, {N, F}, "swiglu_backward up");
  check_shape(dout, {N, F}, "swiglu_backward dout");
  check_shape(dgate, {N, F}, "swiglu_backward dgate");
  check_shape(dup, {N, F}, "swiglu_backward dup");
  Staging st(op);
  float* dg = st.out(dgate, "dgate");
  float* du = st.out(dup, "dup");
  const float* dy = st.in(dout, "dout");
  const float* g = st.in(gate, "gate");
  const float* u = st.in(up, "up");
  const int64_t n = N * F;
#pragma omp parallel
  {
    int64_t b, e;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    if (e > b) swiglu_backward_range(dg + b, du + b, dy + b, g + b, u + b, e - b);
  }
  st.commit();
}

}  // namespace trainer::cpu
