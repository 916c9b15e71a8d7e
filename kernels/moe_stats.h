// The router's per-micro-batch statistics, kept on the device: the z-loss and
// the step's expert loads. They were reduced on the host, which made every MoE
// layer's forward wait for the device three more times (counts, probs, logits)
// and read (E x N) floats back; now the host reads nothing here, and the one
// device wait left per layer is the dispatch plan's (the experts' row counts
// size their GEMMs). The balance losses are kernels/moe_seq_aux.h's.
//
// Layout as kernels/moe_routing.h: N tokens, E experts. `sums` is (2E + 1)
// f64: load (E) and kept (E) assignments per expert, the sum over tokens of
// logsumexp(logits[n])^2. A micro-batch routed on several ranks (sequence
// parallelism, cp) all-reduces it between the two ops. Float tensors
// f32/bf16/f16 where not stated.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                       \
  namespace NS {                                                                              \
  /* sums (2E+1) f64 written from counts (2, E) i32 (moe_plan's load and kept) and logits   */ \
  /* (N, E); every sum in double.                                                          */ \
  void moe_router_sums(Context& ctx, Tensor sums, Tensor counts, Tensor logits);              \
  /* From sums over the micro-batch's `tokens` (Ng): z_loss (1) f32 written, sum lse^2 / Ng. */ \
  /* step (2E) f32 += sums[0, 2E) and step_aux (1) f32 += z_coeff * z, both given or both    */ \
  /* empty (not counted).                                                                   */ \
  void moe_router_losses(Context& ctx, Tensor z_loss, Tensor step, Tensor step_aux,            \
                         Tensor sums, int64_t tokens, float z_coeff);                          \
  /* DeepSeek-V3's aux-loss-free balancing, once per step: bias (E) f32 += rate *             */ \
  /* sign(mean_e load - load_e), load (E) f32 the step's assignments per expert (summed over */ \
  /* dp), the mean in double in expert order.                                                */ \
  void moe_bias_update(Context& ctx, Tensor bias, Tensor load, float rate);                    \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void moe_router_sums(Context& ctx, Tensor sums, Tensor counts, Tensor logits) {
  TRAINER_DISPATCH(ctx, moe_router_sums, sums, counts, logits);
}
inline void moe_router_losses(Context& ctx, Tensor z_loss, Tensor step, Tensor step_aux,
                              Tensor sums, int64_t tokens, float z_coeff) {
  TRAINER_DISPATCH(ctx, moe_router_losses, z_loss, step, step_aux, sums, tokens, z_coeff);
}

inline void moe_bias_update(Context& ctx, Tensor bias, Tensor load, float rate) {
  TRAINER_DISPATCH(ctx, moe_bias_update, bias, load, rate);
}

}  // namespace trainer
