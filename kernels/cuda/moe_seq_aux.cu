// The sequence-wise balance loss on the device (kernels/moe_seq_aux.h), with the
// per-token math of the header shared with the CPU op. Sums: one thread per
// token reduces its row (the K-th pick and the normaliser) into scratch; one
// thread per (sequence, chunk of 64 rows, expert) adds its column over the
// chunk's rows; one thread per (sequence, column) adds the chunks in order. All
// in double, no atomics: the same bits every run (a thread per column over a
// whole sequence would leave most of the GPU idle: one block for B = 1, E = 256).
// The chunks cover max_rows rows, the longest sequence the caller declares; the
// last chunk runs to its sequence's end, so a longer range is still summed
// whole (slower), never cut short.
// Backward: one thread per token (its gradient depends on its row alone).
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/moe_seq_aux.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void seq_aux_rows_kernel(const float* logits, int64_t N, int64_t E, int64_t K,
                                    bool sigmoid, SeqAuxRow* rows) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    rows[n] = seq_aux_row(logits + n * E, E, K, sigmoid);
}

// The sequence's range, clamped into [0, N) (the model builds the table from the
// layout; a bad one must still stay in bounds).
__device__ inline void seq_range(const int32_t* seq_rows, int64_t b, int64_t N, int64_t* first,
                                 int64_t* end) {
  const int64_t first_row = seq_rows[2 * b], rows = seq_rows[2 * b + 1];
  const int64_t f = first_row < 0 ? 0 : (first_row > N ? N : first_row);
  const int64_t e = f + (rows < 0 ? 0 : rows);
  *first = f;
  *end = e > N ? N : e;
}

// partial[b][c] (2E): sequence b's chunk c, zeros past its rows.
__global__ void seq_aux_chunks_kernel(const float* logits, const SeqAuxRow* rows,
                                      const int32_t* seq_rows, int64_t N, int64_t E, int64_t chunks,
                                      bool sigmoid, double* partial) {
  const int64_t b = blockIdx.z, c = blockIdx.y;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= E) return;
  int64_t first = 0, end = 0;
  seq_range(seq_rows, b, N, &first, &end);
  const int64_t begin = first + c * kMoeSeqAuxChunkRows;
  const int64_t stop = c == chunks - 1 ? end : min(end, begin + kMoeSeqAuxChunkRows);
  double count = 0, score = 0;
  for (int64_t n = begin; n < stop; ++n) {
    const float l = logits[n * E + e];
    count += seq_aux_chosen(l, e, rows[n]) ? 1.0 : 0.0;
    score += seq_aux_score(l, rows[n], sigmoid);
  }
  double* out = partial + (b * chunks + c) * 2 * E;
  out[e] = count;
  out[E + e] = score;
}

__global__ void seq_aux_finish_kernel(const double* partial, int64_t B, int64_t E, int64_t chunks,
                                      double* sums) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < B * 2 * E;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = j / (2 * E), col = j % (2 * E);
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[(b * chunks + c) * 2 * E + col];
    sums[j] = s;
  }
}

// One thread, the CPU op's order and roundings.
// factor: seq_aux_factor, computed on the host as the CPU op computes it.
__global__ void seq_aux_loss_kernel(float* loss, float* step_aux, const double* sums, int64_t B,
                                    int64_t E, double factor, float coeff) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double total = 0;
  for (int64_t b = 0; b < B; ++b) {
    double seq = 0;
    for (int64_t e = 0; e < E; ++e)
      seq = __dadd_rn(seq, __dmul_rn(sums[b * 2 * E + e], sums[b * 2 * E + E + e]));
    total = __dadd_rn(total, seq);
  }
  loss[0] = static_cast<float>(__dmul_rn(total, factor));
  if (step_aux) step_aux[0] = __fadd_rn(step_aux[0], __fmul_rn(coeff, loss[0]));
}

__global__ void seq_aux_backward_kernel(float* dlogits, const float* logits,
                                        const int32_t* seq_rows, const double* sums, int64_t N,
                                        int64_t E, int64_t B, int64_t K, double factor,
                                        bool sigmoid) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t b = 0;
    for (; b < B; ++b) {
      int64_t first = 0, end = 0;
      seq_range(seq_rows, b, N, &first, &end);
      if (n >= first && n < end) break;
    }
    if (b == B) continue;  // a row of no sequence: untouched
    seq_aux_row_backward(dlogits + n * E, logits + n * E, sums + b * 2 * E, E, K, factor, sigmoid);
  }
}

void check_args(const Tensor& sums, const Tensor& logits, const Tensor& seq_rows, int64_t top_k,
                const char* op) {
  check_seq_aux_args(sums, logits, seq_rows, top_k, op);
  check_cuda(sums, op, "sums");
  check_cuda(logits, op, "logits");
  check_cuda(seq_rows, op, "seq_rows");
}

}  // namespace

void moe_seq_aux_sums(Context& ctx, Tensor sums, Tensor logits, Tensor seq_rows, int64_t max_rows,
                      int64_t top_k, bool sigmoid) {
  const char* op = "moe_seq_aux_sums";
  CudaState& st = state_of(ctx);
  check_args(sums, logits, seq_rows, top_k, op);
  TRAINER_CHECK(max_rows >= 0, "{}: max_rows {} must not be negative", op, max_rows);
  const int64_t N = logits.size(0), E = logits.size(1), B = seq_rows.size(0);
  const int64_t chunks = moe_seq_aux_chunks(max_rows);
  TRAINER_CHECK(B <= 65535 && chunks <= 65535,
                "{}: {} sequences of up to {} chunks of {} rows; the grid takes at most 65535 of each",
                op, B, chunks, kMoeSeqAuxChunkRows);
  auto* partial =
      static_cast<double*>(scratch(st, moe_seq_aux_scratch_bytes(N, B, E, max_rows), op));
  auto* rows = reinterpret_cast<SeqAuxRow*>(partial + B * chunks * 2 * E);
  if (N > 0) {
    seq_aux_rows_kernel<<<grid_for(N, kThreads), kThreads, 0, st.stream>>>(
        static_cast<const float*>(logits.data), N, E, top_k, sigmoid, rows);
    CUDA_LAUNCH_CHECK();
  }
  const dim3 grid(static_cast<unsigned>((E + kThreads - 1) / kThreads), static_cast<unsigned>(chunks),
                  static_cast<unsigned>(B));
  seq_aux_chunks_kernel<<<grid, kThreads, 0, st.stream>>>(
      static_cast<const float*>(logits.data), rows, static_cast<const int32_t*>(seq_rows.data), N,
      E, chunks, sigmoid, partial);
  CUDA_LAUNCH_CHECK();
  seq_aux_finish_kernel<<<grid_for(B * 2 * E, kThreads), kThreads, 0, st.stream>>>(
      partial, B, E, chunks, static_cast<double*>(sums.data));
  CUDA_LAUNCH_CHECK();
}

void moe_seq_aux_loss(Context& ctx, Tensor loss, Tensor step_aux, Tensor sums, int64_t seq_len,
                      int64_t top_k, float coeff) {
  const char* op = "moe_seq_aux_loss";
  CudaState& st = state_of(ctx);
  const int64_t E = check_seq_aux_sums(sums, seq_len, top_k, op), B = sums.size(0);
  check_cuda(sums, op, "sums");
  check_shape(loss, {1}, "moe_seq_aux_loss loss");
  check_cuda(loss, op, "loss");
  check_dtype(loss, DType::f32, op, "loss");
  if (!step_aux.empty()) {
    check_shape(step_aux, {1}, "moe_seq_aux_loss step_aux");
    check_cuda(step_aux, op, "step_aux");
    check_dtype(step_aux, DType::f32, op, "step_aux");
  }
  seq_aux_loss_kernel<<<1, 32, 0, st.stream>>>(
      static_cast<float*>(loss.data), static_cast<float*>(step_aux.data),
      static_cast<const double*>(sums.data), B, E, seq_aux_factor(B, E, top_k, seq_len), coeff);
  CUDA_LAUNCH_CHECK();
}

void moe_seq_aux_backward(Context& ctx, Tensor dlogits, Tensor logits, Tensor seq_rows,
                          Tensor sums, int64_t seq_len, int64_t top_k, float scale, bool sigmoid) {
  const char* op = "moe_seq_aux_backward";
  CudaState& st = state_of(ctx);
  check_args(sums, logits, seq_rows, top_k, op);
  const int64_t N = logits.size(0), E = logits.size(1), B = seq_rows.size(0);
  check_shape(dlogits, {N, E}, "moe_seq_aux_backward dlogits");
  check_cuda(dlogits, op, "dlogits");
  check_dtype(dlogits, DType::f32, op, "dlogits");
  TRAINER_CHECK(seq_len > 0, "{}: seq_len {} must be positive", op, seq_len);
  if (N == 0) return;
  const double factor = double(scale) * seq_aux_factor(B, E, top_k, seq_len);
  seq_aux_backward_kernel<<<grid_for(N, kThreads), kThreads, 0, st.stream>>>(
      static_cast<float*>(dlogits.data), static_cast<const float*>(logits.data),
      static_cast<const int32_t*>(seq_rows.data), static_cast<const double*>(sums.data), N, E, B,
      top_k, factor, sigmoid);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
