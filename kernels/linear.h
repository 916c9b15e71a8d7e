// Linear layer: the three GEMMs of a fully connected layer, weights stored (out, in)
// as PyTorch and Hugging Face store them. Leading dims of inp/out are flattened (M rows).
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_LINEAR_OPS(NS)                                                               \
  namespace NS {                                                                             \
  /* out (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)]; out written; bias may be empty */ \
  void linear_forward(Context& ctx, Tensor out, Tensor inp, Tensor weight, Tensor bias);     \
  /* dinp (M, K) = dout (M, N) @ weight (N, K)          written; skipped when dinp empty   */ \
  /* dweight (N, K) += dout^T @ inp                      accumulated                        */ \
  /* dbias (N) += column sums of dout                    accumulated; skipped when empty    */ \
  void linear_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,  \
                       Tensor inp, Tensor weight);                                           \
  }
TRAINER_LINEAR_OPS(cpu)
TRAINER_LINEAR_OPS(cuda)
#undef TRAINER_LINEAR_OPS

inline void linear_forward(Context& ctx, Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  TRAINER_DISPATCH(ctx, linear_forward, out, inp, weight, bias);
}
inline void linear_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                            Tensor inp, Tensor weight) {
  TRAINER_DISPATCH(ctx, linear_backward, dinp, dweight, dbias, dout, inp, weight);
}

}  // namespace trainer
