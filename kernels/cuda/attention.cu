// Causal attention with grouped-query heads (kernels/attention.h). 16-bit inputs
// whose shapes allow it take the fused kernels of flash_attention.h; the rest
// (fp32, odd head dims, unaligned views) the unfused path here: per query head h,
// strided-batched GEMMs over the batch around one fused causal softmax kernel.
// Query head h reads KV head h / (H / Hkv); query t sits at position
// q_offset + t of the Tk keys (a context-parallel chunk) and, under document
// masking, sees keys from its document's start on (and, with a sliding window,
// none before q_offset + t - window + 1). dK, dV of a KV head are
// written by its group's first query head (beta = 0) and accumulated by the rest
// (beta = 1), so no atomics are needed. fp32, bf16 or fp16 inputs; scores,
// probabilities and their gradients are fp32 (B, Tq, Tk) scratch buffers reused head
// after head, with 16-bit copies of P and dS feeding the 16-bit GEMMs. With 16-bit
// dk, dv and more than one query head per KV head, the group accumulates into
// fp32 scratch that is rounded once at the end (as the CPU op rounds once).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cast.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/index_check.h"
#include "kernels/memory.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 128;

// The score rows: B * Tq rows of Tk columns; query t of batch b sees columns
// [doc_start[b][t], q_offset + t] (doc_start null: from 0; its values were
// checked before any launch), and none before q_offset + t - window + 1 when
// window > 0.
struct Rows {
  int64_t Tq, Tk, q_offset;
  const int32_t* doc_start;
  int64_t doc_sb;  // doc_start's batch stride
  int64_t window;
  __device__ int64_t first(int64_t b, int64_t t) const {
    const int64_t doc = doc_start ? doc_start[b * doc_sb + t] : 0;
    return window > 0 ? max(doc, q_offset + t - window + 1) : doc;
  }
};

// One block per row r = b * Tq + t of the fp32 scores S (already scaled): turns
// the row into probabilities over its visible columns (zeros elsewhere), in
// place, writes lse[b, h, t], and (16-bit inputs) a TP copy of the row for the
// P @ V GEMM.
template <class TP>
__global__ void causal_softmax_kernel(float* S, TP* P, float* lse, Rows rows, int64_t H,
                                      int64_t h) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x, b = r / rows.Tq, t = r % rows.Tq, last = rows.q_offset + t;
  const int64_t first = rows.first(b, t);
  float* row = S + r * rows.Tk;
  float m = -INFINITY;
  for (int64_t c = first + threadIdx.x; c <= last; c += blockDim.x) m = fmaxf(m, row[c]);
  m = block_max(m, shared);
  float s = 0.0f;
  for (int64_t c = first + threadIdx.x; c <= last; c += blockDim.x) s += expf(row[c] - m);
  s = block_sum(s, shared);
  const float row_lse = m + logf(s);
  for (int64_t c = threadIdx.x; c < rows.Tk; c += blockDim.x) {
    const float p = c >= first && c <= last ? expf(row[c] - row_lse) : 0.0f;
    row[c] = p;
    if constexpr (!std::is_same_v<TP, float>) P[r * rows.Tk + c] = from_float<TP>(p);
  }
  if (threadIdx.x == 0) lse[(b * H + h) * rows.Tq + t] = row_lse;
}

// P = exp(S - lse) on the visible columns, 0 elsewhere (backward's
// recomputation), in place in S, plus the TP copy as above.
template <class TP>
__global__ void causal_probs_kernel(float* S, TP* P, const float* lse, Rows rows, int64_t H,
                                    int64_t h) {
  const int64_t r = blockIdx.x, b = r / rows.Tq, t = r % rows.Tq, last = rows.q_offset + t;
  const int64_t first = rows.first(b, t);
  float* row = S + r * rows.Tk;
  const float row_lse = lse[(b * H + h) * rows.Tq + t];
  for (int64_t c = threadIdx.x; c < rows.Tk; c += blockDim.x) {
    const float p = c >= first && c <= last ? expf(row[c] - row_lse) : 0.0f;
    row[c] = p;
    if constexpr (!std::is_same_v<TP, float>) P[r * rows.Tk + c] = from_float<TP>(p);
  }
}

// Element strides (b, t, h) of a (B, T, heads, D) view whose head dim is contiguous.
struct HeadStrides {
  int64_t b, t, h;
};

// dS = P * (dP - sum_d dO * O) * scale from fp32 P and dP, one block per row; dS
// is written as T (fp32: in place of dP, each element read before it is written).
template <class T>
__global__ void softmax_backward_kernel(T* dS, const float* dP, const float* P, const T* dout,
                                        HeadStrides dout_stride, const T* out,
                                        HeadStrides out_stride, Rows rows, int64_t D,
                                        int64_t h, float scale) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x, b = r / rows.Tq, t = r % rows.Tq;
  const T* dy = dout + b * dout_stride.b + t * dout_stride.t + h * dout_stride.h;
  const T* y = out + b * out_stride.b + t * out_stride.t + h * out_stride.h;
  float dot = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) dot += to_float(dy[d]) * to_float(y[d]);
  dot = block_sum(dot, shared);
  const float* drow = dP + r * rows.Tk;
  const float* prow = P + r * rows.Tk;
  T* srow = dS + r * rows.Tk;
  for (int64_t c = threadIdx.x; c < rows.Tk; c += blockDim.x)
    srow[c] = from_float<T>(prow[c] * (drow[c] - dot) * scale);
}

struct Shape {
  int64_t B, T, H, Hkv, D;  // T: queries
  int64_t Tk, q_offset;     // keys; the first query's position among them
  int64_t window;           // 0: none
  Rows rows(const Tensor& doc_start) const {
    return {T, Tk, q_offset, static_cast<const int32_t*>(doc_start.data),
            doc_start.empty() ? 0 : doc_start.stride[0], window};
  }
};

// q, k, v, out and their gradients may be views into fused buffers (as on the
// CPU): any non-negative strides, but a contiguous head dim.
void check_heads(const Tensor& t, const char* op, const char* name) {
  check_gpu_data(t, op, name);
  check_float_dtype(t, op, name);
  TRAINER_CHECK(t.ndim != 4 || t.stride[3] == 1 || t.shape[3] == 1,
                "{}: {} {} needs a contiguous head dim", op, name, t.str());
  TRAINER_CHECK(t.ndim != 4 || (t.stride[0] >= 0 && t.stride[1] >= 0 && t.stride[2] >= 0),
                "{}: {} {} has negative strides", op, name, t.str());
}

Shape check_shapes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                   int64_t q_offset, int64_t window) {
  for (const Tensor* t : {&q, &k, &v}) {
    check_heads(*t, op, "q/k/v");
    TRAINER_CHECK(t->ndim == 4, "{}: {} must be (B, T, heads, D)", op, t->str());
  }
  const Shape s{q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], k.shape[1], q_offset,
                window};
  TRAINER_CHECK(window >= 0, "{}: window must be >= 0 (0: none), got {}", op, window);
  check_shape(k, {s.B, s.Tk, s.Hkv, s.D}, "attention k");
  TRAINER_CHECK(k.dtype == q.dtype && v.dtype == q.dtype, "{}: q {}, k {}, v {} dtypes differ",
                op, q.str(), k.str(), v.str());
  check_shape(v, {s.B, s.Tk, s.Hkv, s.D}, "attention v");
  TRAINER_CHECK(s.Hkv > 0 && s.H % s.Hkv == 0, "{}: {} query heads not a multiple of {} KV heads",
                op, s.H, s.Hkv);
  TRAINER_CHECK(q_offset >= 0 && q_offset + s.T <= s.Tk,
                "{}: {} queries at offset {} need at most {} keys", op, s.T, q_offset, s.Tk);
  TRAINER_CHECK(s.B <= INT32_MAX && s.B * s.T < (int64_t{1} << 31),
                "{}: B * T = {} rows exceed the grid", op, s.B * s.T);
  return s;
}

// Document masking's first keys: (B, Tq) int32 on the GPU, any batch stride
// (a context-parallel chunk is a view of the whole sequence's), rows
// contiguous, each within the keys its query sees (the CPU op's refusal).
void check_doc_start(CudaState& st, const Tensor& d, const Shape& s, const char* op) {
  if (d.empty()) return;
  check_gpu_data(d, op, "doc_start");
  TRAINER_CHECK(d.dtype == DType::i32 && d.ndim == 2 && d.shape[0] == s.B && d.shape[1] == s.T &&
                    (s.T <= 1 || d.stride[1] == 1) && d.stride[0] >= 0,
                "{}: doc_start {} must be GPU int32 ({}, {}) with contiguous rows", op, d.str(),
                s.B, s.T);
  if (!st.check_index_operands) return;
  const OutOfRange bad = find_out_of_range(st, static_cast<const int32_t*>(d.data), s.B, s.T,
                                           d.stride[0], s.q_offset, 1, op);
  TRAINER_CHECK(!bad.found, "{}: doc_start[{}][{}] = {} is outside [0, {}], the keys query {} may see",
                op, bad.row, bad.col, bad.value, s.q_offset + bad.col, bad.col);
}

void check_like(const Tensor& t, const Tensor& ref, const char* op, const char* name) {
  check_heads(t, op, name);
  TRAINER_CHECK(t.dtype == ref.dtype, "{}: {} {} must have dtype {}", op, name, t.str(),
                dtype_name(ref.dtype));
  check_shape(t, {ref.shape[0], ref.shape[1], ref.shape[2], ref.shape[3]}, name);
}

// Head h of a (B, T, heads, D) view as B row-major (T, D) matrices.
GemmOperand head(const Tensor& t, int64_t h) {
  // A dim of size 1 may carry any stride; cuBLASLt still wants ld >= D.
  const int64_t ld = t.shape[1] == 1 ? std::max<int64_t>(t.stride[1], t.shape[3]) : t.stride[1];
  return {static_cast<const char*>(t.data) + h * t.stride[2] * dtype_size(t.dtype), t.dtype, ld,
          t.stride[0]};
}
HeadStrides strides(const Tensor& t) { return {t.stride[0], t.stride[1], t.stride[2]}; }
// B row-major (Tq, Tk) score matrices (fp32 scores, or their fp32/16-bit probabilities).
GemmOperand scores(const void* S, DType dtype, const Shape& s) {
  return {S, dtype, s.Tk, s.T * s.Tk};
}

// Scratch carved into parts that each start 256-byte aligned (cuBLASLt's best case).
size_t padded(size_t bytes) { return scratch_padded(bytes); }

AttentionShape scratch_shape(const Shape& s, DType dtype) {
  return {s.B, s.T, s.Tk, s.H, s.Hkv, s.D, dtype};
}

void batched(CudaState& st, GemmOperand a, bool trans_a, GemmOperand b, bool trans_b,
             GemmOperand c, int64_t m, int64_t n, int64_t k, int batch, float alpha, float beta) {
  GemmArgs g;
  g.a = a;
  g.b = b;
  g.c = c;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.batch = batch;
  g.alpha = alpha;
  g.beta = beta;
  gemm(st, g);
}

}  // namespace

void attention_forward(Context& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                       int64_t q_offset, Tensor doc_start, int64_t window) {
  const char* op = "attention_forward";
  CudaState& st = state_of(ctx);
  const Shape s = check_shapes(op, q, k, v, q_offset, window);
  check_doc_start(st, doc_start, s, op);
  check_like(out, q, op, "out");
  check_cuda(lse, op, "lse");
  check_dtype(lse, DType::f32, op, "lse");
  check_shape(lse, {s.B, s.H, s.T}, "attention lse");
  if (s.B * s.T * s.H * s.D == 0) return;
  if (flash_attention_applies(st, q, k, v, lse, {&out})) {
    flash_attention_forward(st, out, lse, q, k, v, q_offset, doc_start, window);
    return;
  }
  const int64_t group = s.H / s.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  const DType dtype = q.dtype;
  const bool f32 = dtype == DType::f32;
  // fp32 scores; 16-bit inputs also need a 16-bit copy of the probabilities.
  const size_t score_elems = static_cast<size_t>(s.B * s.T * s.Tk);
  const size_t score_bytes = padded(score_elems * sizeof(float));
  auto* base = static_cast<char*>(
      scratch(st, attention_forward_scratch_bytes(scratch_shape(s, dtype), false), op));
  auto* S = reinterpret_cast<float*>(base);
  void* P = f32 ? static_cast<void*>(S) : static_cast<void*>(base + score_bytes);
  const int batch = static_cast<int>(s.B);
  for (int64_t h = 0; h < s.H; ++h) {
    const int64_t j = h / group;
    // S (Tq, Tk) = scale * q_h (Tq, D) @ k_j (Tk, D)^T
    batched(st, head(q, h), false, head(k, j), true, scores(S, DType::f32, s), s.T, s.Tk, s.D,
            batch, scale, 0.0f);
    TRAINER_FLOAT_DISPATCH(dtype, op, {
      causal_softmax_kernel<T><<<static_cast<unsigned>(s.B * s.T), kThreads, 0, st.stream>>>(
          S, static_cast<T*>(P), static_cast<float*>(lse.data), s.rows(doc_start), s.H, h);
    });
    CUDA_LAUNCH_CHECK();
    // out_h (Tq, D) = P (Tq, Tk) @ v_j (Tk, D)
    batched(st, scores(P, dtype, s), false, head(v, j), false, head(out, h), s.T, s.D, s.Tk,
            batch, 1.0f, 0.0f);
  }
}

void attention_backward(Context& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                        Tensor k, Tensor v, Tensor out, Tensor lse, int64_t q_offset,
                        Tensor doc_start, int64_t window) {
  const char* op = "attention_backward";
  CudaState& st = state_of(ctx);
  const Shape s = check_shapes(op, q, k, v, q_offset, window);
  check_doc_start(st, doc_start, s, op);
  check_like(dq, q, op, "dq");
  check_like(dout, q, op, "dout");
  check_like(out, q, op, "out");
  check_like(dk, k, op, "dk");
  check_like(dv, v, op, "dv");
  check_cuda(lse, op, "lse");
  check_dtype(lse, DType::f32, op, "lse");
  check_shape(lse, {s.B, s.H, s.T}, "attention lse");
  if (s.B * s.T * s.H * s.D == 0) return;
  if (flash_attention_applies(st, q, k, v, lse, {&out, &dout, &dq, &dk, &dv})) {
    flash_attention_backward(st, dq, dk, dv, dout, q, k, v, out, lse, q_offset, doc_start,
                             window);
    return;
  }
  const int64_t group = s.H / s.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  const DType dtype = q.dtype;
  const bool f32 = dtype == DType::f32;
  // fp32 P and dP; 16-bit inputs add 16-bit copies of P and dS for the GEMMs and,
  // when a KV head serves several query heads, fp32 dk and dv accumulators.
  const size_t score_elems = static_cast<size_t>(s.B * s.T * s.Tk);
  const size_t kv_elems = static_cast<size_t>(s.B * s.Tk * s.Hkv * s.D);
  const bool kv_f32 = !f32 && group > 1;
  const size_t f32_part = padded(score_elems * sizeof(float));
  const size_t narrow_part = f32 ? 0 : padded(score_elems * dtype_size(dtype));
  const size_t kv_part = kv_f32 ? padded(kv_elems * sizeof(float)) : 0;
  auto* base = static_cast<char*>(
      scratch(st, attention_backward_scratch_bytes(scratch_shape(s, dtype), false), op));
  auto* P = reinterpret_cast<float*>(base);
  auto* dP = reinterpret_cast<float*>(base + f32_part);
  char* narrow = base + 2 * f32_part;
  void* Pt = f32 ? static_cast<void*>(P) : static_cast<void*>(narrow);
  void* dS = f32 ? static_cast<void*>(dP) : static_cast<void*>(narrow + narrow_part);
  char* kv = narrow + 2 * narrow_part;
  const Tensor dk_acc =
      kv_f32 ? Tensor(kv, {s.B, s.Tk, s.Hkv, s.D}, DType::f32, Device::cuda) : dk;
  const Tensor dv_acc =
      kv_f32 ? Tensor(kv + kv_part, {s.B, s.Tk, s.Hkv, s.D}, DType::f32, Device::cuda) : dv;
  const int batch = static_cast<int>(s.B);
  const unsigned rows = static_cast<unsigned>(s.B * s.T);
  for (int64_t h = 0; h < s.H; ++h) {
    const int64_t j = h / group;
    const float kv_beta = h % group == 0 ? 0.0f : 1.0f;  // first head of the group writes
    batched(st, head(q, h), false, head(k, j), true, scores(P, DType::f32, s), s.T, s.Tk, s.D,
            batch, scale, 0.0f);
    TRAINER_FLOAT_DISPATCH(dtype, op, {
      causal_probs_kernel<T><<<rows, kThreads, 0, st.stream>>>(
          P, static_cast<T*>(Pt), static_cast<const float*>(lse.data), s.rows(doc_start), s.H,
          h);
    });
    CUDA_LAUNCH_CHECK();
    // dv_j (Tk, D) (+)= P^T (Tk, Tq) @ dout_h (Tq, D)
    batched(st, scores(Pt, dtype, s), true, head(dout, h), false, head(dv_acc, j), s.Tk, s.D,
            s.T, batch, 1.0f, kv_beta);
    // dP (Tq, Tk) = dout_h (Tq, D) @ v_j (Tk, D)^T
    batched(st, head(dout, h), false, head(v, j), true, scores(dP, DType::f32, s), s.T, s.Tk,
            s.D, batch, 1.0f, 0.0f);
    TRAINER_FLOAT_DISPATCH(dtype, op, {
      softmax_backward_kernel<T><<<rows, kThreads, 0, st.stream>>>(
          static_cast<T*>(dS), dP, P, static_cast<const T*>(dout.data), strides(dout),
          static_cast<const T*>(out.data), strides(out), s.rows(doc_start), s.D, h, scale);
    });
    CUDA_LAUNCH_CHECK();
    // dq_h (Tq, D) = dS (Tq, Tk) @ k_j (Tk, D)
    batched(st, scores(dS, dtype, s), false, head(k, j), false, head(dq, h), s.T, s.D, s.Tk,
            batch, 1.0f, 0.0f);
    // dk_j (Tk, D) (+)= dS^T (Tk, Tq) @ q_h (Tq, D)
    batched(st, scores(dS, dtype, s), true, head(q, h), false, head(dk_acc, j), s.Tk, s.D,
            s.T, batch, 1.0f, kv_beta);
  }
  if (kv_f32) {
    cuda::cast(ctx, dk, dk_acc, Tensor{});
    cuda::cast(ctx, dv, dv_acc, Tensor{});
  }
}

}  // namespace trainer::cuda
