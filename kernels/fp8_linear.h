// The three GEMMs of a linear layer on fp8 operands with per-tensor scales (what
// delayed scaling quantises: kernels/fp8_scaling.h). An operand is its codes (e4m3
// or e5m2) and a (1) f32 dequantisation factor on the op's device (1/scale); its
// value is code * factor, one fp32 multiply, as cast() dequantises. The result is
// the linear layer's (kernels/linear.h) on those values: products exact, fp32
// accumulation (the CUDA forward uses Hopper's fast fp8 accumulation), one rounding
// per output. Hopper's FP8 GEMMs take only C = A B^T, so the backward reads the
// transposes of the gradient, input and weight (kernels/cast_transpose.h makes them).
// On the CUDA backend M, N and K must be multiples of 16 (its alignment rule).
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (M, N) = deq(xq (M, K)) @ deq(wq (N, K))^T [+ bias (N) f32]; out f32, bf16 or    */ \
  /* fp16, written; bias may be empty                                                      */ \
  void fp8_linear_forward(Context& ctx, Tensor out, Tensor xq, Tensor x_scale_inv, Tensor wq, \
                          Tensor w_scale_inv, Tensor bias);                                  \
  /* With G = deq(gq (M, N)) (gq_t (N, M) the same codes transposed), X = deq(xq_t (K, M))^T */ \
  /* and W = deq(wq_t (K, N))^T:                                                           */ \
  /* dinp (M, K) = G @ W                 written; f32, bf16 or fp16; skipped when empty     */ \
  /* dweight (N, K) f32 += G^T @ X       accumulated                                        */ \
  /* dbias (N) f32 += column sums of G   accumulated; skipped when empty                    */ \
  void fp8_linear_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor gq, \
                           Tensor gq_t, Tensor g_scale_inv, Tensor xq_t, Tensor x_scale_inv,   \
                           Tensor wq_t, Tensor w_scale_inv);                                 \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void fp8_linear_forward(Context& ctx, Tensor out, Tensor xq, Tensor x_scale_inv, Tensor wq,
                               Tensor w_scale_inv, Tensor bias) {
  TRAINER_DISPATCH(ctx, fp8_linear_forward, out, xq, x_scale_inv, wq, w_scale_inv, bias);
}
inline void fp8_linear_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor gq,
                                Tensor gq_t, Tensor g_scale_inv, Tensor xq_t, Tensor x_scale_inv,
                                Tensor wq_t, Tensor w_scale_inv) {
  TRAINER_DISPATCH(ctx, fp8_linear_backward, dinp, dweight, dbias, gq, gq_t, g_scale_inv, xq_t,
                   x_scale_inv, wq_t, w_scale_inv);
}
}  // namespace trainer
