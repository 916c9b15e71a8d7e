// CPU LayerNorm over the last dim: rows in parallel; the weight/bias gradients
// are reduced from per-thread partial sums in thread order (deterministic).
#include "kernels/layernorm.h"

#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

TRAINER_CPU_CLONES void layernorm_row(float* out, float* mean_out, float* rstd_out,
                                      const float* x, const float* w, const float* b, int64_t C,
                                      float eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < C; ++i) sum += x[i];
  const float mean = sum / C;
  float var = 0.0f;  // two passes: no cancellation when |mean| >> std
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.0f / std::sqrt(var / C + eps);
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) out[i] = (x[i] - mean) * rstd * w[i] + b[i];
  *mean_out = mean;
  *rstd_out = rstd;
}

TRAINER_CPU_CLONES void layernorm_row_backward(float* dx, float* dw, float* db, const float* dy,
                                               const float* x, const float* w, float mean,
                                               float rstd, int64_t C) {
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
  for (int64_t i = 0; i < C; ++i) {
    const float norm = (x[i] - mean) * rstd;
    const float dnorm = dy[i] * w[i];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean /= C;
  dnorm_norm_mean /= C;
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) {
    const float norm = (x[i] - mean) * rstd;
    const float dnorm = dy[i] * w[i];
    db[i] += dy[i];
    dw[i] += dy[i] * norm;
    dx[i] = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
  }
}

}  // namespace

void layernorm_forward(Context& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor inp,
                       Tensor weight, Tensor bias, float eps) {
  const char* op = "layernorm_forward";
  const int64_t N = inp.size(0), C = inp.size(-1);
  check_shape(inp, {N, C}, "layernorm_forward inp");
  check_shape(out, {N, C}, "layernorm_forward out");
  check_shape(mean, {N}, "layernorm_forward mean");
  check_shape(rstd, {N}, "layernorm_forward rstd");
  check_shape(weight, {C}, "layernorm_forward weight");
  check_shape(bias, {C}, "layernorm_forward bias");
  Staging st(op);
  float* o = st.out(out, "out");
  float* mu = st.out(mean, "mean");
  float* rs = st.out(rstd, "rstd");
  const float* x = st.in(inp, "inp");
  const float* w = st.in(weight, "weight");
  const float* b = st.in(bias, "bias");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) layernorm_row(o + n * C, mu + n, rs + n, x + n * C, w, b, C, eps);
  st.commit();
}

void layernorm_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                        Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  const int64_t N = inp.size(0), C = inp.size(-1);
  check_shape(inp, {N, C}, "layernorm_backward inp");
  check_shape(dout, {N, C}, "layernorm_backward dout");
  check_shape(dinp, {N, C}, "layernorm_backward dinp");
  check_shape(mean, {N}, "layernorm_backward mean");
  check_shape(rstd, {N}, "layernorm_backward rstd");
  check_shape(weight, {C}, "layernorm_backward weight");
  check_shape(dweight, {C}, "layernorm_backward dweight");
  check_shape(dbias, {C}, "layernorm_backward dbias");
  Staging st(op);
  float* dx = st.out(dinp, "dinp");
  float* dw = st.inout(dweight, "dweight");
  float* db = st.inout(dbias, "dbias");
  const float* dy = st.in(dout, "dout");
  const float* x = st.in(inp, "inp");
  const float* w = st.in(weight, "weight");
  const float* mu = st.in(mean, "mean");
  const float* rs = st.in(rstd, "rstd");
  const int num_threads = omp_get_max_threads();
  float* partial = thread_scratch(1, static_cast<size_t>(num_threads) * 2 * C);
#pragma omp parallel num_threads(num_threads)
  {
    const int t = omp_get_thread_num();
    float* pw = partial + static_cast<int64_t>(t) * 2 * C;
    float* pb = pw + C;
    std::fill(pw, pw + 2 * C, 0.0f);
    int64_t r0, r1;
    split_range(N, t, omp_get_num_threads(), &r0, &r1);
    for (int64_t n = r0; n < r1; ++n)
      layernorm_row_backward(dx + n * C, pw, pb, dy + n * C, x + n * C, w, mu[n], rs[n], C);
#pragma omp barrier
    int64_t c0, c1;  // the cross-thread sum, split over columns
    split_range(C, t, omp_get_num_threads(), &c0, &c1);
    for (int u = 0; u < omp_get_num_threads(); ++u) {
      const float* qw = partial + static_cast<int64_t>(u) * 2 * C;
      for (int64_t c = c0; c < c1; ++c) {
        dw[c] += qw[c];
        db[c] += qw[C + c];
      }
    }
  }
  st.commit();
}

}  // namespace trainer::cpu
