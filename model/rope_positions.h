// RoPE at each token's position, as the attention layers need it: the
// token's global position (its cp chunk's offset added), or its position in
// its document (LayerEnv::positions, data.reset_position_ids).
#pragma once

#include "kernels/rope_scaling.h"
#include "model/layer_env.h"
#include "parallel/cp_layout.h"

namespace trainer::model {

// RoPE forward (or, forward false, its backward) in place on x (B, T, h, D),
// x contiguous, this rank's tokens laid out as `cp` says.
void rope_at_positions(const LayerEnv& env, const parallel::CpLayout& cp, const Rope& rotary,
                       Tensor x, bool forward);

}  // namespace trainer::model
