// The bytes of CudaState scratch each CUDA op requests, as plain host functions:
// the ops size their requests with them and the memory plan sizes the
// reservation with them (model layers declare what they will call, see
// Buffers::declare_op_scratch), so the two cannot disagree. No CUDA types here:
// `trainer plan` runs, and CI builds, without CUDA. Where an op picks a path at
// run time (a cuBLASLt epilogue that may have no algorithm) the size is that of
// its largest path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/tensor.h"

namespace trainer {

// cuBLASLt's workspace (CudaState::workspace), allocated once per state.
inline constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;
// gridDim.y and gridDim.z limit.
inline constexpr int kCudaMaxGridY = 65535;
// The fused attention kernels' tile (query rows and key columns) and head dims.
inline constexpr int kFlashTile = 64;
inline constexpr int kFlashMinHeadDim = 16, kFlashMaxHeadDim = 128;

// Scratch parts start 256-byte aligned (cuBLASLt's best case).
size_t scratch_padded(size_t bytes);

// Deterministic column sums of an (rows, cols) grid (kernels/cuda/colsum.cuh).
int64_t column_sum_chunks(int64_t rows);
size_t column_sums_scratch_bytes(int64_t rows, int64_t cols);

// Attention, q (B, Tq, H, D), k and v (B, Tk, Hkv, D). The shape part of
// flash_attention_applies (the rest, alignment and strides, holds for the
// model's buffers); st.flash_attention is the other part (run.attention).
bool flash_attention_shape_applies(DType dtype, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                                   int64_t Hkv, int64_t D);
struct AttentionShape {
  int64_t B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0, D = 0;
  DType dtype = DType::f32;
};
size_t attention_forward_scratch_bytes(const AttentionShape& s, bool fused);
size_t attention_backward_scratch_bytes(const AttentionShape& s, bool fused);
// Either pass, the path picked by flash_attention_shape_applies (the unfused
// one everywhere without allow_fused: CudaState::flash_attention off).
size_t attention_scratch_bytes(const AttentionShape& s, bool allow_fused = true);

// Where a kernel must finish a GEMM's fp32 result before it is rounded to 16
// bits (a bias cuBLASLt's epilogue cannot add, GELU without its epilogue, FP8's
// bias), the GEMM runs over blocks of rows, each into an fp32 (rows, width)
// staging buffer of at most kStagingBlockBytes (one block of 16 rows when a row
// alone is larger), so that path never asks for a whole (M, width) fp32 copy:
// 64 MiB where GPT-2 124M's MLP at 64 x 1024 tokens would take 768 MiB.
// CudaState::staging_block_bytes (the ops' figure) defaults to it; the tests
// lower it to run many blocks.
inline constexpr size_t kStagingBlockBytes = size_t{64} << 20;
int64_t staging_block_rows(int64_t M, int64_t width, size_t block_bytes = kStagingBlockBytes);
size_t staging_scratch_bytes(int64_t M, int64_t width, size_t block_bytes = kStagingBlockBytes);

// Linear (kernels/linear.h), inp (M, K), out (M, N). Forward: a bias kernel
// after the GEMM writes a 16-bit output through fp32 staging (rows, N).
size_t linear_forward_scratch_bytes(int64_t M, int64_t N, DType out_dtype, bool bias,
                                    size_t block_bytes = kStagingBlockBytes);
// Backward with a bias: BGRADB's (N) fp32 result, or the column sums without it.
size_t linear_bias_grad_scratch_bytes(int64_t N);
size_t linear_backward_scratch_bytes(int64_t M, int64_t N, bool bias);
// Linear + GELU (kernels/linear_gelu.h), dtype that of the activations. Without
// cuBLASLt's GELU epilogue (an fp32 bias with 16-bit activations, a width not a
// multiple of 8, or no algorithm) a 16-bit forward stages the GEMM in fp32
// (rows, N) and a 16-bit backward its dpre product in fp32 (rows, K); the
// backward's weight and bias gradients are then linear_backward's.
size_t linear_gelu_forward_scratch_bytes(int64_t M, int64_t N, DType dtype,
                                         size_t block_bytes = kStagingBlockBytes);
size_t linear_dgelu_backward_scratch_bytes(int64_t M, int64_t K, int64_t N, DType dtype, bool bias,
                                           size_t block_bytes = kStagingBlockBytes);
// FP8 linear (kernels/fp8_linear.h): fp32 staging (rows, N) for the bias, column
// sums for its gradient.
size_t fp8_linear_forward_scratch_bytes(int64_t M, int64_t N, bool bias,
                                        size_t block_bytes = kStagingBlockBytes);
size_t fp8_linear_backward_scratch_bytes(int64_t M, int64_t N, bool bias);
// amax / the overflow checks of kernels/cast.h: one word.
size_t amax_scratch_bytes();
// The range check of integer operands (document starts, learned positions;
// kernels/cuda/index_check.h): one 8-byte record.
size_t index_check_scratch_bytes();

// LayerNorm / RMSNorm backward over (rows, C): the weight (and bias) gradient's column sums.
size_t norm_scratch_bytes(int64_t rows, int64_t C);

// sum_of_squares over n elements: one double per block.
int64_t sum_of_squares_blocks(int64_t n);
size_t sum_of_squares_scratch_bytes(int64_t n);

// cub::DeviceRadixSort::SortPairs of n (i32/u32 key, i32 value) pairs: a bound
// on its temporary storage that the ops request (and check cub's own answer
// against), since cub's figure needs the device: the alternate key and value
// buffers, one-sweep's look-back (<= 256 counters of 8 bytes per tile of >= 256
// items) and a fixed allowance for its bins and counters.
size_t radix_sort_scratch_bound(int64_t n);
// Embedding backward over n tokens: sorted ids, token indices in and sorted, the sort.
size_t embedding_backward_scratch_bytes(int64_t n);
// moe_plan over `assignments` (tokens * top_k) and E experts.
size_t moe_plan_scratch_bytes(int64_t assignments, int64_t E);
// moe_router_sums over N tokens: blocks of rows, each writing one double partial.
int64_t moe_router_sum_chunks(int64_t N);
size_t moe_router_sums_scratch_bytes(int64_t N);
// moe_seq_aux_sums over N tokens, B sequences of at most max_rows rows, E
// experts: each token's row reduction (SeqAuxRow), then each sequence's partial
// sums per chunk of kMoeSeqAuxChunkRows rows. Sized by max_rows, not N: with B
// sequences of N / B rows each, a grid over N rows per sequence would be
// (B - 1) / B empty and its partials would grow as B^2.
inline constexpr int64_t kMoeSeqAuxChunkRows = 64;
int64_t moe_seq_aux_chunks(int64_t max_rows);
size_t moe_seq_aux_scratch_bytes(int64_t N, int64_t B, int64_t E, int64_t max_rows);

}  // namespace trainer
