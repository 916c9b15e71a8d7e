// CPU vocab-parallel softmax cross-entropy: the three passes and the backward,
// rows in parallel, each row a vectorised loop over the valid local columns.
// bf16/fp16 logits, the largest tensor of a step, are converted a row at a time
// into per-thread scratch (thread_scratch slots 0 and 1), not staged whole.
#include "kernels/cross_entropy.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

// Columns [0, valid) of the local slice hold real tokens; the rest is padding.
int64_t valid_columns(int64_t Vp, int64_t vocab_start, int64_t vocab_size) {
  return std::clamp<int64_t>(vocab_size - vocab_start, 0, Vp);
}

void check_targets(const char* op, const int32_t* targets, int64_t N, int64_t vocab_size) {
  for (int64_t n = 0; n < N; ++n)
    TRAINER_CHECK(targets[n] < vocab_size, "{}: target {} at row {} is outside the vocabulary of {}",
                  op, targets[n], n, vocab_size);
}

// Row n of logits as fp32: in place when fp32, else its first `cols` columns
// converted into `scratch`.
const float* logits_row(const Tensor& logits, int64_t n, int64_t cols, float* scratch) {
  const int64_t Vp = logits.size(-1);
  if (logits.dtype == DType::f32) return static_cast<const float*>(logits.data) + n * Vp;
  to_f32(logits.dtype, static_cast<const uint16_t*>(logits.data) + n * Vp, scratch, cols);
  return scratch;
}

TRAINER_CPU_CLONES float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

TRAINER_CPU_CLONES float row_sumexp(const float* x, int64_t n, float maxv) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += exp_approx(x[i] - maxv);
  return s;
}

TRAINER_CPU_CLONES void row_softmax_scaled(float* dx, const float* x, int64_t n, float maxv,
                                           float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dx[i] = exp_approx(x[i] - maxv) * scale;
}

}  // namespace

void cross_entropy_max(Context& ctx, Tensor maxv, Tensor logits, int64_t vocab_start,
                       int64_t vocab_size) {
  const char* op = "cross_entropy_max";
  const int64_t N = logits.size(0), Vp = logits.size(-1);
  check_shape(logits, {N, Vp}, "cross_entropy_max logits");
  check_shape(maxv, {N}, "cross_entropy_max maxv");
  Staging st(op);
  float* mx = st.out(maxv, "maxv");
  check_float_arg(logits, op, "logits");
  const int64_t V = valid_columns(Vp, vocab_start, vocab_size);
#pragma omp parallel
  {
    float* scratch = logits.dtype == DType::f32 ? nullptr : thread_scratch(0, Vp);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) mx[n] = row_max(logits_row(logits, n, V, scratch), V);
  }
  st.commit();
}

void cross_entropy_sumexp(Context& ctx, Tensor sumexp, Tensor target_logit, Tensor logits,
                          Tensor maxv, Tensor targets, int64_t vocab_start, int64_t vocab_size) {
  const char* op = "cross_entropy_sumexp";
  const int64_t N = logits.size(0), Vp = logits.size(-1);
  check_shape(logits, {N, Vp}, "cross_entropy_sumexp logits");
  check_shape(maxv, {N}, "cross_entropy_sumexp maxv");
  check_shape(sumexp, {N}, "cross_entropy_sumexp sumexp");
  check_shape(target_logit, {N}, "cross_entropy_sumexp target_logit");
  check_shape(targets, {N}, "cross_entropy_sumexp targets");
  Staging st(op);
  float* se = st.out(sumexp, "sumexp");
  float* tl = st.out(target_logit, "target_logit");
  check_float_arg(logits, op, "logits");
  const float* mx = st.in(maxv, "maxv");
  const int32_t* tg = i32(targets, op, "targets");
  check_targets(op, tg, N, vocab_size);
  const int64_t V = valid_columns(Vp, vocab_start, vocab_size);
#pragma omp parallel
  {
    float* scratch = logits.dtype == DType::f32 ? nullptr : thread_scratch(0, Vp);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* row = logits_row(logits, n, V, scratch);
      se[n] = row_sumexp(row, V, mx[n]);
      const int64_t local = static_cast<int64_t>(tg[n]) - vocab_start;
      tl[n] = (tg[n] >= 0 && local >= 0 && local < V) ? row[local] : 0.0f;
    }
  }
  st.commit();
}

void cross_entropy_loss(Context& ctx, Tensor losses, Tensor maxv, Tensor sumexp,
                        Tensor target_logit, Tensor targets) {
  const char* op = "cross_entropy_loss";
  const int64_t N = losses.size(0);
  check_shape(losses, {N}, "cross_entropy_loss losses");
  check_shape(maxv, {N}, "cross_entropy_loss maxv");
  check_shape(sumexp, {N}, "cross_entropy_loss sumexp");
  check_shape(target_logit, {N}, "cross_entropy_loss target_logit");
  check_shape(targets, {N}, "cross_entropy_loss targets");
  Staging st(op);
  float* l = st.out(losses, "losses");
  const float* mx = st.in(maxv, "maxv");
  const float* se = st.in(sumexp, "sumexp");
  const float* tl = st.in(target_logit, "target_logit");
  const int32_t* tg = i32(targets, op, "targets");
  for (int64_t n = 0; n < N; ++n) l[n] = tg[n] < 0 ? 0.0f : std::log(se[n]) + mx[n] - tl[n];
  st.commit();
}

void cross_entropy_backward(Context& ctx, Tensor dlogits, Tensor logits, Tensor maxv,
                            Tensor sumexp, Tensor targets, Tensor dloss, int64_t vocab_start,
                            int64_t vocab_size) {
  const char* op = "cross_entropy_backward";
  const int64_t N = logits.size(0), Vp = logits.size(-1);
  check_shape(logits, {N, Vp}, "cross_entropy_backward logits");
  check_shape(dlogits, {N, Vp}, "cross_entropy_backward dlogits");
  check_shape(maxv, {N}, "cross_entropy_backward maxv");
  check_shape(sumexp, {N}, "cross_entropy_backward sumexp");
  check_shape(targets, {N}, "cross_entropy_backward targets");
  check_shape(dloss, {N}, "cross_entropy_backward dloss");
  Staging st(op);
  check_float_arg(dlogits, op, "dlogits");
  check_float_arg(logits, op, "logits");
  const float* mx = st.in(maxv, "maxv");
  const float* se = st.in(sumexp, "sumexp");
  const float* dl = st.in(dloss, "dloss");
  const int32_t* tg = i32(targets, op, "targets");
  check_targets(op, tg, N, vocab_size);
  const int64_t V = valid_columns(Vp, vocab_start, vocab_size);
  // In place (the LM head turns its logits into dlogits) or disjoint. In place and
  // narrow, a row is converted, rewritten and stored back through one scratch row.
  const bool in_place = dlogits.data == logits.data;
  const char* d0 = static_cast<const char*>(dlogits.data);
  const char* x0 = static_cast<const char*>(logits.data);
  TRAINER_CHECK(in_place ? dlogits.dtype == logits.dtype
                         : d0 + dlogits.nbytes() <= x0 || x0 + logits.nbytes() <= d0,
                "{}: dlogits {} and logits {} must be the same tensor or disjoint", op,
                dlogits.str(), logits.str());
  const bool narrow_x = logits.dtype != DType::f32, narrow_d = dlogits.dtype != DType::f32;
#pragma omp parallel
  {
    float* x_scratch = narrow_x ? thread_scratch(0, Vp) : nullptr;
    float* d_scratch = !narrow_d ? nullptr : in_place ? x_scratch : thread_scratch(1, Vp);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float* drow = narrow_d ? d_scratch : static_cast<float*>(dlogits.data) + n * Vp;
      if (tg[n] < 0) {
        std::memset(drow, 0, sizeof(float) * Vp);
      } else {
        row_softmax_scaled(drow, logits_row(logits, n, V, x_scratch), V, mx[n], dl[n] / se[n]);
        if (V < Vp) std::memset(drow + V, 0, sizeof(float) * (Vp - V));
        const int64_t local = static_cast<int64_t>(tg[n]) - vocab_start;
        if (local >= 0 && local < V) drow[local] -= dl[n];
      }
      if (narrow_d) from_f32(dlogits.dtype, drow, static_cast<uint16_t*>(dlogits.data) + n * Vp, Vp);
    }
  }
  st.commit();
}

}  // namespace trainer::cpu
