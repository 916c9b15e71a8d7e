// CPU RMSNorm over the last dim: rows in parallel; the weight gradient is
// reduced from per-thread partial sums in thread order (deterministic).
#include "kernels/rmsnorm.h"

#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

TRAINER_CPU_CLONES void rmsnorm_row(float* out, float* rstd_out, const float* x, const float* w,
                                    int64_t C, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < C; ++i) ss += x[i] * x[i];
  const float rstd = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) out[i] = x[i] * rstd * w[i];
  *rstd_out = rstd;
}

TRAINER_CPU_CLONES void rmsnorm_row_backward(float* dx, float* dw, const float* dy, const float* x,
                                             const float* w, float rstd, int64_t C) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < C; ++i) dot += dy[i] * w[i] * x[i] * rstd;
  dot /= C;
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) {
    const float norm = x[i] * rstd;
    dw[i] += dy[i] * norm;
    dx[i] = (dy[i] * w[i] - norm * dot) * rstd;
  }
}

}  // namespace

void rmsnorm_forward(Context& ctx, Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  const char* op = "rmsnorm_forward";
  const int64_t N = inp.size(0), C = inp.size(-1);
  check_shape(inp, {N, C}, "rmsnorm_forward inp");
  check_shape(out, {N, C}, "rmsnorm_forward out");
  check_shape(rstd, {N}, "rmsnorm_forward rstd");
  check_shape(weight, {C}, "rmsnorm_forward weight");
  Staging st(op);
  float* o = st.out(out, "out");
  float* rs = st.out(rstd, "rstd");
  const float* x = st.in(inp, "inp");
  const float* w = st.in(weight, "weight");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) rmsnorm_row(o + n * C, rs + n, x + n * C, w, C, eps);
  st.commit();
}

void rmsnorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dout, Tensor inp,
                      Tensor weight, Tensor rstd) {
  const char* op = "rmsnorm_backward";
  const int64_t N = inp.size(0), C = inp.size(-1);
  check_shape(inp, {N, C}, "rmsnorm_backward inp");
  check_shape(dout, {N, C}, "rmsnorm_backward dout");
  check_shape(dinp, {N, C}, "rmsnorm_backward dinp");
  check_shape(rstd, {N}, "rmsnorm_backward rstd");
  check_shape(weight, {C}, "rmsnorm_backward weight");
  check_shape(dweight, {C}, "rmsnorm_backward dweight");
  Staging st(op);
  float* dx = st.out(dinp, "dinp");
  float* dw = st.inout(dweight, "dweight");
  const float* dy = st.in(dout, "dout");
  const float* x = st.in(inp, "inp");
  const float* w = st.in(weight, "weight");
  const float* rs = st.in(rstd, "rstd");
  const int num_threads = omp_get_max_threads();
  float* partial = thread_scratch(1, static_cast<size_t>(num_threads) * C);
#pragma omp parallel num_threads(num_threads)
  {
    const int t = omp_get_thread_num();
    float* pw = partial + static_cast<int64_t>(t) * C;
    std::fill(pw, pw + C, 0.0f);
    int64_t r0, r1;
    split_range(N, t, omp_get_num_threads(), &r0, &r1);
    for (int64_t n = r0; n < r1; ++n)
      rmsnorm_row_backward(dx + n * C, pw, dy + n * C, x + n * C, w, rs[n], C);
#pragma omp barrier
    int64_t c0, c1;
    split_range(C, t, omp_get_num_threads(), &c0, &c1);
    for (int u = 0; u < omp_get_num_threads(); ++u)
      for (int64_t c = c0; c < c1; ++c) dw[c] += partial[static_cast<int64_t>(u) * C + c];
  }
  st.commit();
}

}  // namespace trainer::cpu
