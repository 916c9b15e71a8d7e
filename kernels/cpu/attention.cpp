// CPU causal grouped-query attention. One (batch, head) pair is a sequence of
// 64-query blocks; each block is three or five single-threaded sgemm calls over
// only the keys it can see (the upper triangle is skipped; with a query offset
// the block sees the whole prefix before it too; keys before the least first
// key of its rows, under document masking or a sliding window, are skipped
// too), with the softmax between them. Forward keeps only the log-sum-exp;
// backward recomputes the probabilities. Scratch: two (64, Tk) fp32 buffers per OpenMP thread, kept
// across calls (thread_scratch slots 0 and 1). bf16/fp16 q, k, v, ... are staged
// into contiguous fp32 copies (staging.h); fp32 views are used with their strides.
#include "kernels/attention.h"

#include <cblas.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

constexpr int64_t kBlockQ = 64;

// A (B, T, heads, D) view whose head dim is contiguous; the other strides are
// free, so q, k, v may be views into one fused QKV buffer.
struct Heads {
  float* data;
  int64_t stride_b, stride_t, stride_h;
  float* at(int64_t b, int64_t h) const { return data + b * stride_b + h * stride_h; }
};

Heads heads(Staging& st, const Tensor& t, int64_t B, int64_t T, int64_t H, int64_t D,
            const char* op, const char* name, bool write) {
  check_shape(t, {B, T, H, D}, name);
  TRAINER_CHECK(t.stride[3] == 1 || D == 1, "{}: {} {} needs a contiguous head dim", op, name,
                t.str());
  const StagedView v = st.view(t, name, !write, write);
  return Heads{v.data, v.stride[0], v.stride[1], v.stride[2]};
}

// Rows r of s (rows, ld) see keys [first[r], i0 + r] of the block's window
// (first null: from 0). Turns scores into normalised probabilities (masked
// entries 0); writes lse.
TRAINER_CPU_CLONES void softmax_block(float* s, int64_t rows, int64_t ld, int64_t i0,
                                      const int64_t* first, float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    const int64_t j0 = first ? first[r] : 0, n = i0 + r + 1;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = j0; j < n; ++j) m = row[j] > m ? row[j] : m;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = j0; j < n; ++j) {
      const float e = exp_approx(row[j] - m);
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = j0; j < n; ++j) row[j] *= inv;
    for (int64_t j = 0; j < j0; ++j) row[j] = 0.0f;
    for (int64_t j = n; j < ld; ++j) row[j] = 0.0f;
    lse[r] = m + std::log(sum);
  }
}

// p = exp(s - lse) (masked 0), then ds = p * (dp - delta) * scale, in place in dp.
TRAINER_CPU_CLONES void softmax_grad_block(float* p, float* dp, int64_t rows, int64_t ld,
                                           int64_t i0, const int64_t* first, const float* lse,
                                           const float* delta, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* prow = p + r * ld;
    float* drow = dp + r * ld;
    const int64_t j0 = first ? first[r] : 0, n = i0 + r + 1;
    const float l = lse[r], dl = delta[r];
#pragma omp simd
    for (int64_t j = j0; j < n; ++j) {
      const float pj = exp_approx(prow[j] - l);
      prow[j] = pj;
      drow[j] = pj * (drow[j] - dl) * scale;
    }
    for (int64_t j = 0; j < j0; ++j) {
      prow[j] = 0.0f;
      drow[j] = 0.0f;
    }
    for (int64_t j = n; j < ld; ++j) {
      prow[j] = 0.0f;
      drow[j] = 0.0f;
    }
  }
}

// Document masking and the sliding window: the first key each query sees
// (doc_start checked once per call).
struct DocStarts {
  const int32_t* data = nullptr;
  int64_t stride_b = 0;
  int64_t q_offset = 0, window = 0;
  DocStarts(const char* op, const Tensor& t, int64_t B, int64_t T, int64_t q_off, int64_t w)
      : q_offset(q_off), window(w) {
    TRAINER_CHECK(window >= 0, "{}: window must be >= 0 (0: none), got {}", op, window);
    if (t.empty()) return;
    check_shape(t, {B, T}, "attention doc_start");
    TRAINER_CHECK(t.device == Device::cpu && t.dtype == DType::i32 && (T <= 1 || t.stride[1] == 1),
                  "{}: doc_start {} must be CPU int32 with contiguous rows", op, t.str());
    data = static_cast<const int32_t*>(t.data);
    stride_b = t.stride[0];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t v = data[b * stride_b + i];
        TRAINER_CHECK(v >= 0 && v <= q_offset + i,
                      "{}: doc_start[{}][{}] = {} is outside [0, {}], the keys query {} may see",
                      op, b, i, v, q_offset + i, i);
      }
  }
  bool active() const { return data || window > 0; }
  // The first key query i of sequence b sees.
  int64_t first_key(int64_t b, int64_t i) const {
    const int64_t doc = data ? data[b * stride_b + i] : 0;
    return window > 0 ? std::max(doc, q_offset + i - window + 1) : doc;
  }
  // The block of queries [i0, i0 + rows) of sequence b: its rows' first keys
  // relative to the block's first key (returned), which is their least.
  int64_t block(int64_t b, int64_t i0, int64_t rows, int64_t* first) const {
    if (!active()) return 0;
    int64_t k0 = first_key(b, i0);
    for (int64_t r = 1; r < rows; ++r) k0 = std::min(k0, first_key(b, i0 + r));
    for (int64_t r = 0; r < rows; ++r) first[r] = first_key(b, i0 + r) - k0;
    return k0;
  }
};

// The checks and views both directions share: (B, Tq, H, D) queries and
// outputs, (B, Tk, Hkv, D) keys and values, lse (B, H, Tq). out and lse are
// written forward, read backward.
struct Problem {
  int64_t B, T, Tk, H, D, Hkv, group, q_offset;  // T: queries
  float scale;
  Heads Q, K, V, O;
  float* L;
  Problem(const char* op, Staging& st, const Tensor& q, const Tensor& k, const Tensor& v,
          const Tensor& out, const Tensor& lse, int64_t q_off, bool forward) {
    TRAINER_CHECK(q.ndim == 4 && k.ndim == 4, "{}: q {} and k {} must be (B, T, H, D)", op,
                  q.str(), k.str());
    B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Tk = k.size(1), Hkv = k.size(2);
    q_offset = q_off;
    TRAINER_CHECK(D > 0, "{}: head dim of {} must be positive", op, q.str());
    TRAINER_CHECK(Hkv > 0 && H % Hkv == 0, "{}: {} query heads are not a multiple of {} KV heads",
                  op, H, Hkv);
    TRAINER_CHECK(q_offset >= 0 && q_offset + T <= Tk,
                  "{}: {} queries at offset {} need at most {} keys", op, T, q_offset, Tk);
    Q = heads(st, q, B, T, H, D, op, "attention q", false);
    K = heads(st, k, B, Tk, Hkv, D, op, "attention k", false);
    V = heads(st, v, B, Tk, Hkv, D, op, "attention v", false);
    O = heads(st, out, B, T, H, D, op, "attention out", forward);
    check_shape(lse, {B, H, T}, "attention lse");
    L = forward ? st.out(lse, "lse") : const_cast<float*>(st.in(lse, "lse"));
    group = H / Hkv;
    scale = 1.0f / std::sqrt(static_cast<float>(D));
  }
};

}  // namespace

void attention_forward(Context& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                       int64_t q_offset, Tensor doc_start, int64_t window) {
  const char* op = "attention_forward";
  Staging st(op);
  const Problem P(op, st, q, k, v, out, lse, q_offset, true);
  const DocStarts docs(op, doc_start, P.B, P.T, q_offset, window);
  const int64_t B = P.B, T = P.T, Tk = P.Tk, H = P.H, D = P.D, group = P.group;
  const Heads &Q = P.Q, &K = P.K, &V = P.V, &O = P.O;
  float* L = P.L;
  const float scale = P.scale;
  blas_single_threaded();
#pragma omp parallel
  {
    float* s = thread_scratch(0, kBlockQ * Tk);
    int64_t first[kBlockQ];
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = Q.at(b, h);
        const float* kh = K.at(b, h / group);
        const float* vh = V.at(b, h / group);
        float* oh = O.at(b, h);
        float* lh = L + (b * H + h) * T;
        for (int64_t i0 = 0; i0 < T; i0 += kBlockQ) {
          // Keys [k0, k0 + keys): the block's window; keys before its first
          // document are skipped.
          const int64_t rows = std::min(kBlockQ, T - i0);
          const int64_t k0 = docs.block(b, i0, rows, first), keys = q_offset + i0 + rows - k0;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, D, scale,
                      qh + i0 * Q.stride_t, Q.stride_t, kh + k0 * K.stride_t, K.stride_t, 0.0f, s,
                      keys);
          softmax_block(s, rows, keys, q_offset + i0 - k0, docs.active() ? first : nullptr, lh + i0);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, keys, 1.0f, s, keys,
                      vh + k0 * V.stride_t, V.stride_t, 0.0f, oh + i0 * O.stride_t, O.stride_t);
        }
      }
    }
  }
  st.commit();
}

void attention_backward(Context& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                        Tensor k, Tensor v, Tensor out, Tensor lse, int64_t q_offset,
                        Tensor doc_start, int64_t window) {
  const char* op = "attention_backward";
  Staging st(op);
  const Problem P(op, st, q, k, v, out, lse, q_offset, false);
  const DocStarts docs(op, doc_start, P.B, P.T, q_offset, window);
  const int64_t B = P.B, T = P.T, Tk = P.Tk, H = P.H, D = P.D, Hkv = P.Hkv, group = P.group;
  const Heads &Q = P.Q, &K = P.K, &V = P.V, &O = P.O;
  const Heads dO = heads(st, dout, B, T, H, D, op, "attention dout", false);
  const Heads dQ = heads(st, dq, B, T, H, D, op, "attention dq", true);
  const Heads dK = heads(st, dk, B, Tk, Hkv, D, op, "attention dk", true);
  const Heads dV = heads(st, dv, B, Tk, Hkv, D, op, "attention dv", true);
  const float* L = P.L;
  const float scale = P.scale;
  blas_single_threaded();
  // One task per KV head: the query heads sharing it accumulate into its dk, dv
  // in a fixed order, so no two threads write the same rows.
#pragma omp parallel
  {
    float* p = thread_scratch(0, kBlockQ * Tk);
    float* dp = thread_scratch(1, kBlockQ * Tk);
    float delta[kBlockQ];
    int64_t first[kBlockQ];
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t g = 0; g < Hkv; ++g) {
        const float* kh = K.at(b, g);
        const float* vh = V.at(b, g);
        float* dkh = dK.at(b, g);
        float* dvh = dV.at(b, g);
        for (int64_t t = 0; t < Tk; ++t) {
          std::memset(dkh + t * dK.stride_t, 0, sizeof(float) * D);
          std::memset(dvh + t * dV.stride_t, 0, sizeof(float) * D);
        }
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* qh = Q.at(b, h);
          const float* oh = O.at(b, h);
          const float* doh = dO.at(b, h);
          float* dqh = dQ.at(b, h);
          const float* lh = L + (b * H + h) * T;
          for (int64_t i0 = 0; i0 < T; i0 += kBlockQ) {
            const int64_t rows = std::min(kBlockQ, T - i0);
            const int64_t k0 = docs.block(b, i0, rows, first), keys = q_offset + i0 + rows - k0;
            const float* kb = kh + k0 * K.stride_t;
            const float* vb = vh + k0 * V.stride_t;
            float* dkb = dkh + k0 * dK.stride_t;
            float* dvb = dvh + k0 * dV.stride_t;
            const float* qb = qh + i0 * Q.stride_t;
            const float* dob = doh + i0 * dO.stride_t;
            for (int64_t r = 0; r < rows; ++r) {
              const float* o_row = oh + (i0 + r) * O.stride_t;
              const float* do_row = dob + r * dO.stride_t;
              float acc = 0.0f;
              for (int64_t d = 0; d < D; ++d) acc += o_row[d] * do_row[d];
              delta[r] = acc;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, D, scale, qb,
                        Q.stride_t, kb, K.stride_t, 0.0f, p, keys);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, D, 1.0f, dob,
                        dO.stride_t, vb, V.stride_t, 0.0f, dp, keys);
            softmax_grad_block(p, dp, rows, keys, q_offset + i0 - k0, docs.active() ? first : nullptr,
                               lh + i0, delta, scale);
            // dv += p^T dout; dq = ds k; dk += ds^T q (ds already carries the scale)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, D, rows, 1.0f, p, keys,
                        dob, dO.stride_t, 1.0f, dvb, dV.stride_t);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, keys, 1.0f, dp, keys,
                        kb, K.stride_t, 0.0f, dqh + i0 * dQ.stride_t, dQ.stride_t);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, D, rows, 1.0f, dp, keys, qb,
                        Q.stride_t, 1.0f, dkb, dK.stride_t);
          }
        }
      }
    }
  }
  st.commit();
}

}  // namespace trainer::cpu
