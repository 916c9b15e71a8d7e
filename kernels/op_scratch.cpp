// Scratch sizes of the CUDA ops (kernels/op_scratch.h).
#include "kernels/op_scratch.h"

#include <algorithm>

#include "kernels/memory.h"
#include "kernels/moe_seq_aux.h"

namespace trainer {
namespace {
constexpr int kSumOfSquaresThreads = 256, kSumOfSquaresMaxBlocks = 1024;
size_t f32_bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }
size_t i32_bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(int32_t); }
}  // namespace

size_t scratch_padded(size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

int64_t column_sum_chunks(int64_t rows) { return std::clamp<int64_t>((rows + 63) / 64, 1, 1024); }
size_t column_sums_scratch_bytes(int64_t rows, int64_t cols) {
  return f32_bytes(column_sum_chunks(rows) * cols);
}

bool flash_attention_shape_applies(DType dtype, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                                   int64_t Hkv, int64_t D) {
  if (dtype != DType::bf16 && dtype != DType::f16) return false;
  if (D < kFlashMinHeadDim || D > kFlashMaxHeadDim || D % 16 != 0) return false;
  if (Tq > INT32_MAX || Tk > INT32_MAX || B * H > INT32_MAX || B * Hkv > INT32_MAX) return false;
  return (std::max(Tq, Tk) + kFlashTile - 1) / kFlashTile <= kCudaMaxGridY;
}

// Unfused: fp32 (B, Tq, Tk) scores, plus a 16-bit copy of the probabilities.
size_t attention_forward_scratch_bytes(const AttentionShape& s, bool fused) {
  if (fused) return 0;
  const size_t scores = static_cast<size_t>(s.B * s.Tq * s.Tk);
  const bool f32 = s.dtype == DType::f32;
  return scratch_padded(scores * sizeof(float)) + (f32 ? 0 : scores * dtype_size(s.dtype));
}

// Fused: one fp32 delta per query row and head. Unfused: fp32 P and dP, 16-bit
// copies of P and dS, and fp32 dk, dv accumulators when 16-bit KV heads serve
// several query heads.
size_t attention_backward_scratch_bytes(const AttentionShape& s, bool fused) {
  if (fused) return f32_bytes(s.B * s.H * s.Tq);
  const size_t scores = static_cast<size_t>(s.B * s.Tq * s.Tk);
  const bool f32 = s.dtype == DType::f32;
  const bool kv_f32 = !f32 && s.H / s.Hkv > 1;
  const size_t f32_part = scratch_padded(scores * sizeof(float));
  const size_t narrow_part = f32 ? 0 : scratch_padded(scores * dtype_size(s.dtype));
  const size_t kv_part = kv_f32 ? scratch_padded(f32_bytes(s.B * s.Tk * s.Hkv * s.D)) : 0;
  return 2 * (f32_part + narrow_part + kv_part);
}

size_t attention_scratch_bytes(const AttentionShape& s, bool allow_fused) {
  const bool fused =
      allow_fused && flash_attention_shape_applies(s.dtype, s.B, s.Tq, s.Tk, s.H, s.Hkv, s.D);
  return std::max(attention_forward_scratch_bytes(s, fused), attention_backward_scratch_bytes(s, fused));
}

// Multiples of 16 rows keep every block's first row as aligned as the first.
int64_t staging_block_rows(int64_t M, int64_t width, size_t block_bytes) {
  const int64_t fit = static_cast<int64_t>(block_bytes / f32_bytes(std::max<int64_t>(width, 1)));
  return std::min(M, std::max<int64_t>(16, fit / 16 * 16));
}
size_t staging_scratch_bytes(int64_t M, int64_t width, size_t block_bytes) {
  return f32_bytes(staging_block_rows(M, width, block_bytes) * width);
}

size_t linear_forward_scratch_bytes(int64_t M, int64_t N, DType out_dtype, bool bias,
                                    size_t block_bytes) {
  return bias && out_dtype != DType::f32 ? staging_scratch_bytes(M, N, block_bytes) : 0;
}
size_t linear_bias_grad_scratch_bytes(int64_t N) { return f32_bytes(N); }
size_t linear_backward_scratch_bytes(int64_t M, int64_t N, bool bias) {
  return bias ? std::max(linear_bias_grad_scratch_bytes(N), column_sums_scratch_bytes(M, N)) : 0;
}

size_t linear_gelu_forward_scratch_bytes(int64_t M, int64_t N, DType dtype, size_t block_bytes) {
  return dtype != DType::f32 ? staging_scratch_bytes(M, N, block_bytes) : 0;
}
size_t linear_dgelu_backward_scratch_bytes(int64_t M, int64_t K, int64_t N, DType dtype, bool bias,
                                           size_t block_bytes) {
  return std::max(dtype != DType::f32 ? staging_scratch_bytes(M, K, block_bytes) : 0,
                  linear_backward_scratch_bytes(M, N, bias));
}

size_t fp8_linear_forward_scratch_bytes(int64_t M, int64_t N, bool bias, size_t block_bytes) {
  return bias ? staging_scratch_bytes(M, N, block_bytes) : 0;
}
size_t fp8_linear_backward_scratch_bytes(int64_t M, int64_t N, bool bias) {
  return bias ? column_sums_scratch_bytes(M, N) : 0;
}
size_t amax_scratch_bytes() { return sizeof(unsigned); }
size_t index_check_scratch_bytes() { return sizeof(unsigned long long); }

size_t norm_scratch_bytes(int64_t rows, int64_t C) { return column_sums_scratch_bytes(rows, C); }

int64_t sum_of_squares_blocks(int64_t n) {
  return std::clamp<int64_t>((n + kSumOfSquaresThreads - 1) / kSumOfSquaresThreads, 1,
                             kSumOfSquaresMaxBlocks);
}
size_t sum_of_squares_scratch_bytes(int64_t n) {
  return static_cast<size_t>(sum_of_squares_blocks(n)) * sizeof(double);
}

// cub's one-sweep sort (32-bit keys on sm_60 and later; a single tile needs 1
// byte): bins of <= 256 counters per pass, per-pass counters and 256-byte
// alignment of each part fit in kFixed many times over.
size_t radix_sort_scratch_bound(int64_t n) {
  constexpr size_t kFixed = size_t{128} << 10;
  const int64_t tiles = (n + 255) / 256;
  return 2 * scratch_padded(i32_bytes(n)) + scratch_padded(static_cast<size_t>(tiles) * 256 * 8) +
         kFixed;
}

size_t embedding_backward_scratch_bytes(int64_t n) {
  return 3 * scratch_padded(i32_bytes(n)) + radix_sort_scratch_bound(n);
}

// Sorted experts, assignment indices in and sorted, run and slot starts, the
// slot total and the bad-expert record, then the sort.
size_t moe_plan_scratch_bytes(int64_t assignments, int64_t E) {
  return 3 * scratch_padded(i32_bytes(assignments)) + 2 * scratch_padded(i32_bytes(E)) + 2 * 256 +
         radix_sort_scratch_bound(assignments);
}

// 32 rows a chunk (a warp per row for the z-loss), at most 1024 chunks.
int64_t moe_router_sum_chunks(int64_t N) { return std::clamp<int64_t>((N + 31) / 32, 1, 1024); }
size_t moe_router_sums_scratch_bytes(int64_t N) {
  return static_cast<size_t>(moe_router_sum_chunks(N)) * sizeof(double);
}
int64_t moe_seq_aux_chunks(int64_t max_rows) {
  return std::max<int64_t>(1, (max_rows + kMoeSeqAuxChunkRows - 1) / kMoeSeqAuxChunkRows);
}
size_t moe_seq_aux_scratch_bytes(int64_t N, int64_t B, int64_t E, int64_t max_rows) {
  // The partials first: doubles, at the scratch's alignment.
  return static_cast<size_t>(B * moe_seq_aux_chunks(max_rows) * 2 * E) * sizeof(double) +
         static_cast<size_t>(std::max<int64_t>(N, 1)) * sizeof(SeqAuxRow);
}

}  // namespace trainer
