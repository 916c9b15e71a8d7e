// A linear layer fused with the GELU (tanh approximation, kernels/gelu.h) around
// it, as cuBLASLt's GELU epilogues compute it: GPT-2's MLP without a round trip
// through memory for the activation. The pre-activation is the fp32 GEMM output
// (plus bias) and the GELU reads that fp32 value, not its rounded copy; the
// backward applies GELU's derivative to the fp32 product before it is rounded.
// In fp32 that is exactly linear + gelu; in bf16/fp16 it rounds once where the
// composition rounds twice, and the CPU op does the same so both backends agree.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_LINEAR_GELU_OPS(NS)                                                          \
  namespace NS {                                                                             \
  /* pre (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)], act (M, N) = gelu(pre);     */  \
  /* both written from the fp32 value; bias may be empty; act must not alias pre         */  \
  void linear_gelu_forward(Context& ctx, Tensor act, Tensor pre, Tensor inp, Tensor weight,  \
                           Tensor bias);                                                     \
  /* The backward of out = act @ weight^T + bias where act = gelu(pre):                  */  \
  /* dpre (M, K) = (dout (M, N) @ weight (N, K)) * gelu'(pre)   written, one rounding    */  \
  /* dweight (N, K) += dout^T @ act                             accumulated               */  \
  /* dbias (N) += column sums of dout                           accumulated; may be empty */ \
  void linear_dgelu_backward(Context& ctx, Tensor dpre, Tensor dweight, Tensor dbias,        \
                             Tensor dout, Tensor act, Tensor weight, Tensor pre);            \
  }
TRAINER_LINEAR_GELU_OPS(cpu)
TRAINER_LINEAR_GELU_OPS(cuda)
#undef TRAINER_LINEAR_GELU_OPS

inline void linear_gelu_forward(Context& ctx, Tensor act, Tensor pre, Tensor inp, Tensor weight,
                                Tensor bias) {
  TRAINER_DISPATCH(ctx, linear_gelu_forward, act, pre, inp, weight, bias);
}
inline void linear_dgelu_backward(Context& ctx, Tensor dpre, Tensor dweight, Tensor dbias,
                                  Tensor dout, Tensor act, Tensor weight, Tensor pre) {
  TRAINER_DISPATCH(ctx, linear_dgelu_backward, dpre, dweight, dbias, dout, act, weight, pre);
}

}  // namespace trainer
