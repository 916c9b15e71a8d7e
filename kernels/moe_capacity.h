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
#include "kernels/tensor.h"

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

// The arguments' shapes, checked alike by both backends.
struct RunLoadsShape {
  int64_t N, K, R, E;
};
inline RunLoadsShape check_run_loads_shapes(const Tensor& loads, const Tensor& topk_idx,
                                            const Tensor& runs) {
  TRAINER_CHECK(topk_idx.ndim == 2 && loads.ndim == 2 && runs.ndim == 2,
                "moe_run_loads: topk_idx {}, loads {} and runs {} must be 2-D", topk_idx.str(),
                loads.str(), runs.str());
  const RunLoadsShape s{topk_idx.size(0), topk_idx.size(1), loads.size(0), loads.size(1)};
  check_shape(runs, {s.R, 2}, "moe_run_loads runs");
  return s;
}
struct CapacityTakenShape {
  int64_t P, E, Q;
};
inline CapacityTakenShape check_capacity_taken_shapes(const Tensor& taken, const Tensor& all_loads,
                                                      const Tensor& order, int64_t capacity) {
  TRAINER_CHECK(all_loads.ndim == 2 && order.ndim == 2,
                "moe_capacity_taken: all_loads {} and order {} must be 2-D", all_loads.str(),
                order.str());
  const CapacityTakenShape s{all_loads.size(0), all_loads.size(1), order.size(0)};
  check_shape(taken, {s.E}, "moe_capacity_taken taken");
  check_shape(order, {s.Q, 2}, "moe_capacity_taken order");
  TRAINER_CHECK(capacity > 0, "moe_capacity_taken: capacity {} must be positive", capacity);
  return s;
}

inline void moe_run_loads(Context& ctx, Tensor loads, Tensor topk_idx, Tensor runs) {
  TRAINER_DISPATCH(ctx, moe_run_loads, loads, topk_idx, runs);
}
inline void moe_capacity_taken(Context& ctx, Tensor taken, Tensor all_loads, Tensor order,
                               int64_t capacity) {
  TRAINER_DISPATCH(ctx, moe_capacity_taken, taken, all_loads, order, capacity);
}

}  // namespace trainer
