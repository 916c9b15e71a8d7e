// Expert capacity shared by the ranks that split one micro-batch's tokens
// (sequence parallelism's tp blocks, context parallelism's chunks;
// model/moe_capacity.h says why per-run loads suffice), computed on the device.
// The layer read its top-k choices back, counted on the host, gathered, read
// the loads back and uploaded moe_plan's `taken`: three device waits per MoE
// layer and micro-batch. Now the host only builds the two tables below, once.
//
// runs (R, 2) i32: this rank's runs of routed rows in local row order, (first
// row, length) each; rows of length 0 pad the table to the longest rank's.
// order (Q, 2) i32: every sharing rank's runs in the micro-batch's token order,
// (row of the gathered loads, 1 where the run is this rank's, else 0).
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                        \
  namespace NS {                                                                               \
  /* loads (R, E) i32 written: loads[r][e] = the assignments to expert e in topk_idx (N, K)   */ \
  /* i32's rows runs[r]. An expert outside [0, E) is not counted: moe_plan, which takes the    */ \
  /* same top-k next, refuses it.                                                              */ \
  void moe_run_loads(Context& ctx, Tensor loads, Tensor topk_idx, Tensor runs);                \
  /* taken (E) i32 written, moe_plan's: capacity minus the assignments this rank keeps, those  */ \
  /* whose place among the expert's in token order is below capacity. The runs of `order` are */ \
  /* walked in turn, each adding its row of all_loads (P, E) i32 to the places taken.          */ \
  void moe_capacity_taken(Context& ctx, Tensor taken, Tensor all_loads, Tensor order,          \
                          int64_t capacity);                                                   \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void moe_run_loads(Context& ctx, Tensor loads, Tensor topk_idx, Tensor runs) {
  TRAINER_DISPATCH(ctx, moe_run_loads, loads, topk_idx, runs);
}
inline void moe_capacity_taken(Context& ctx, Tensor taken, Tensor all_loads, Tensor order,
                               int64_t capacity) {
  TRAINER_DISPATCH(ctx, moe_capacity_taken, taken, all_loads, order, capacity);
}

}  // namespace trainer
