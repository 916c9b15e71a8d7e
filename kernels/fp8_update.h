// Transformer Engine's amax_and_scale_update as an op (the rule of
// kernels/fp8_scaling.h), so delayed scaling's state can stay where the GEMMs
// read it: on the GPU the step's amaxes are reduced and the scales advanced in
// stream order, with no copy to the host and no wait for the device.
//
// history (H, n) f32: row 0 this step's amaxes, rows 1..H-1 oldest to newest.
// scale, scale_inv, scaled_max (n) f32; scaled_max[i] = fp8_max(format_i) / 2^margin.
// For every column i: amax = fmax over the H rows (a NaN entry skipped); the rows
// roll (row r takes row r+1, the last row takes row 0, row 0 becomes 0); when amax
// is finite and > 0, scale = scaled_max / amax (an inf quotient: FLT_MAX), else
// scale is kept; scale_inv = 1 / scale. Both backends give the same bits.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                  \
  namespace NS {                                                                         \
  void fp8_scaling_update(Context& ctx, Tensor history, Tensor scale, Tensor scale_inv,  \
                          Tensor scaled_max);                                            \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

// The shapes both backends require: history (H >= 1, n), the others (n).
inline int64_t check_fp8_update_shapes(const Tensor& history, const Tensor& scale,
                                       const Tensor& scale_inv, const Tensor& scaled_max) {
  TRAINER_CHECK(history.ndim == 2 && history.size(0) >= 1,
                "fp8_scaling_update: history {} must be (H >= 1, n)", history.str());
  const int64_t n = history.size(1);
  check_shape(scale, {n}, "fp8_scaling_update scale");
  check_shape(scale_inv, {n}, "fp8_scaling_update scale_inv");
  check_shape(scaled_max, {n}, "fp8_scaling_update scaled_max");
  return n;
}

inline void fp8_scaling_update(Context& ctx, Tensor history, Tensor scale, Tensor scale_inv,
                               Tensor scaled_max) {
  TRAINER_DISPATCH(ctx, fp8_scaling_update, history, scale, scale_inv, scaled_max);
}

}  // namespace trainer
