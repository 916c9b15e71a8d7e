// AdamW (decoupled weight decay, as torch.optim.AdamW) over flat fp32 ranges.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

struct AdamWArgs {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // clipping factor (and 1/loss_scale under fp16)
};

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  /* param, m, v (n) updated in place from grad (n):                                     */ \
  /*   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;                 */ \
  /*   param -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + weight_decay * param)       */ \
  void adamw_update(Context& ctx, Tensor param, Tensor grad, Tensor m, Tensor v,             \
                    const AdamWArgs& args);                                                  \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void adamw_update(Context& ctx, Tensor param, Tensor grad, Tensor m, Tensor v,
                         const AdamWArgs& args) {
  TRAINER_DISPATCH(ctx, adamw_update, param, grad, m, v, args);
}
}  // namespace trainer
