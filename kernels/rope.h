// Rotary position embedding in Hugging Face's rotate-half layout: dim i pairs with
// i + D/2, angle = (pos_offset + t) * theta^(-2i/D) (scaled when rope.scaling is
// active: Llama 3.1's, linear or YaRN, kernels/rope_scaling.h; YaRN also
// multiplies the rotation by its attention factor). Backward is the transpose:
// the inverse rotation, times the same factor.
// positions (B, T) int32, when not empty, gives each token's position instead of
// pos_offset + t (documents packed in a sequence restarting at 0, Megatron's
// --reset-position-ids); pos_offset must then be 0.
// Float tensors: f32, bf16 or f16 on the CPU backend, each independently; fp32 math.
#pragma once

#include "kernels/dispatch.h"
#include "kernels/rope_scaling.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* out (B, T, H, D) = rotate(inp (B, T, H, D)); written; out may alias inp             */  \
  void rope_forward(Context& ctx, Tensor out, Tensor inp, Rope rope, int64_t pos_offset,     \
                    Tensor positions = {});                                                  \
  /* dinp (B, T, H, D) = rotate^-1(dout); written; dinp may alias dout                    */ \
  void rope_backward(Context& ctx, Tensor dinp, Tensor dout, Rope rope,                      \
                     int64_t pos_offset, Tensor positions = {});                             \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void rope_forward(Context& ctx, Tensor out, Tensor inp, Rope rope, int64_t pos_offset,
                         Tensor positions = {}) {
  TRAINER_DISPATCH(ctx, rope_forward, out, inp, rope, pos_offset, positions);
}
inline void rope_backward(Context& ctx, Tensor dinp, Tensor dout, Rope rope,
                          int64_t pos_offset, Tensor positions = {}) {
  TRAINER_DISPATCH(ctx, rope_backward, dinp, dout, rope, pos_offset, positions);
}
}  // namespace trainer
