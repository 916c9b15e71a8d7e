// The CUDA ops' scratch sizes (kernels/op_scratch.h) on shapes worked by hand:
// the memory plan reserves exactly these, and the ops refuse more.
#include <catch2/catch.hpp>

#include "kernels/op_scratch.h"

using namespace trainer;

TEST_CASE("scratch parts are 256-byte aligned; column sums take one row per 64", "[cpu][op_scratch]") {
  CHECK(scratch_padded(0) == 0);
  CHECK(scratch_padded(1) == 256);
  CHECK(scratch_padded(256) == 256);
  CHECK(scratch_padded(257) == 512);
  CHECK(column_sums_scratch_bytes(1000, 10) == 16 * 10 * 4);      // ceil(1000 / 64) chunks
  CHECK(column_sums_scratch_bytes(100000, 3) == 1024 * 3 * 4);    // at most 1024 chunks
  CHECK(norm_scratch_bytes(64, 768) == 768 * 4);
}

TEST_CASE("fused attention is planned for 16-bit head dims 16..128 in steps of 16", "[cpu][op_scratch]") {
  CHECK(flash_attention_shape_applies(DType::bf16, 2, 1024, 1024, 12, 12, 64));
  CHECK(flash_attention_shape_applies(DType::f16, 2, 16, 16, 4, 2, 128));
  CHECK_FALSE(flash_attention_shape_applies(DType::f32, 2, 16, 16, 4, 4, 64));
  CHECK_FALSE(flash_attention_shape_applies(DType::bf16, 2, 16, 16, 4, 4, 8));
  CHECK_FALSE(flash_attention_shape_applies(DType::bf16, 2, 16, 16, 4, 4, 72));
  CHECK_FALSE(flash_attention_shape_applies(DType::bf16, 2, 16, 16, 4, 4, 256));
  // Fused: forward none, backward one fp32 delta per (b, h, query).
  const AttentionShape fused{2, 16, 16, 4, 2, 64, DType::bf16};
  CHECK(attention_forward_scratch_bytes(fused, true) == 0);
  CHECK(attention_scratch_bytes(fused) == 2 * 4 * 16 * 4);
}

TEST_CASE("unfused attention: fp32 scores, 16-bit copies, fp32 dK/dV for GQA", "[cpu][op_scratch]") {
  // fp32, B 2, T 16: (2, 16, 16) scores = 512 floats = 2048 bytes; backward P and dP.
  const AttentionShape f32{2, 16, 16, 4, 4, 8, DType::f32};
  CHECK(attention_forward_scratch_bytes(f32, false) == 2048);
  CHECK(attention_backward_scratch_bytes(f32, false) == 2 * 2048);
  CHECK(attention_scratch_bytes(f32) == 4096);
  // bf16 (head dim 8: unfused): + the 16-bit P (1024 bytes); backward + 16-bit P and dS.
  const AttentionShape mha{2, 16, 16, 4, 4, 8, DType::bf16};
  CHECK(attention_forward_scratch_bytes(mha, false) == 2048 + 1024);
  CHECK(attention_backward_scratch_bytes(mha, false) == 2 * (2048 + 1024));
  // GQA (2 query heads per KV head): + fp32 dK and dV, (2, 16, 2, 8) floats each.
  const AttentionShape gqa{2, 16, 16, 4, 2, 8, DType::bf16};
  CHECK(attention_backward_scratch_bytes(gqa, false) == 2 * (2048 + 1024 + 2048));
  CHECK(attention_scratch_bytes(gqa) == 10240);
  // A context-parallel chunk: 8 queries over the 32 keys of the sequence.
  CHECK(attention_forward_scratch_bytes({1, 8, 32, 2, 2, 8, DType::f32}, false) == 8 * 32 * 4);
}

TEST_CASE("linear: fp32 staging for a 16-bit output's bias, the bias gradient's sums", "[cpu][op_scratch]") {
  CHECK(linear_forward_scratch_bytes(6, 10, DType::bf16, true) == 6 * 10 * 4);
  CHECK(linear_forward_scratch_bytes(6, 10, DType::f16, true) == 240);
  CHECK(linear_forward_scratch_bytes(6, 10, DType::f32, true) == 0);  // the bias added in place
  CHECK(linear_forward_scratch_bytes(6, 10, DType::bf16, false) == 0);
  CHECK(linear_bias_grad_scratch_bytes(10) == 40);
  CHECK(linear_backward_scratch_bytes(6, 10, true) == 40);    // BGRADB's 10 floats = 1 chunk x 10
  CHECK(linear_backward_scratch_bytes(640, 10, true) == 400); // 10 chunks of column sums
  CHECK(linear_backward_scratch_bytes(640, 10, false) == 0);
  CHECK(fp8_linear_forward_scratch_bytes(6, 10, true) == 240);
  CHECK(fp8_linear_forward_scratch_bytes(6, 10, false) == 0);
  CHECK(fp8_linear_backward_scratch_bytes(640, 10, true) == 400);
  CHECK(amax_scratch_bytes() == 4);
  CHECK(index_check_scratch_bytes() == 8);
}

TEST_CASE("fp32 staging: blocks of rows, multiples of 16, at most 64 MiB", "[cpu][op_scratch]") {
  // GPT-2 124M's MLP at 64 x 1024 tokens: 5461 rows of 3072 floats fit, 5456 taken.
  CHECK(staging_block_rows(65536, 3072) == 5456);
  CHECK(staging_scratch_bytes(65536, 3072) == size_t{5456} * 3072 * 4);
  CHECK(staging_scratch_bytes(65536, 3072) <= kStagingBlockBytes);
  CHECK(linear_forward_scratch_bytes(65536, 3072, DType::bf16, true) == size_t{5456} * 3072 * 4);
  CHECK(linear_gelu_forward_scratch_bytes(65536, 3072, DType::bf16) == size_t{5456} * 3072 * 4);
  // dpre (M, K = 3072) staged; the (N = 768) bias gradient's sums are smaller.
  CHECK(linear_dgelu_backward_scratch_bytes(65536, 3072, 768, DType::bf16, true) ==
        size_t{5456} * 3072 * 4);
  CHECK(fp8_linear_forward_scratch_bytes(65536, 3072, true) == size_t{5456} * 3072 * 4);
  CHECK(staging_block_rows(100, 3072) == 100);               // fits whole
  CHECK(staging_block_rows(100, int64_t{2} << 20) == 16);     // a row over the block: 16 rows
  CHECK(staging_block_rows(100, 10, 1) == 16);               // the tests' tiny blocks
  CHECK(staging_block_rows(7, 10, 1) == 7);
  CHECK(staging_block_rows(0, 10) == 0);
  CHECK(staging_scratch_bytes(0, 10) == 0);
}

TEST_CASE("sums of squares, the embedding's and MoE plan's sorts", "[cpu][op_scratch]") {
  CHECK(sum_of_squares_scratch_bytes(1) == 8);
  CHECK(sum_of_squares_scratch_bytes(256 * 5 + 1) == 6 * 8);
  CHECK(sum_of_squares_scratch_bytes(int64_t{1} << 40) == 1024 * 8);
  // 1000 pairs: alternate keys and values (4096 each), 4 tiles' look-back (8192), 128 KiB.
  CHECK(radix_sort_scratch_bound(1000) == 2 * 4096 + 8192 + 131072);
  CHECK(embedding_backward_scratch_bytes(1000) == 3 * 4096 + 147456);
  CHECK(moe_plan_scratch_bytes(1000, 8) == 3 * 4096 + 2 * 256 + 512 + 147456);
}
