// The collectives of ZeRO 1/2 by unit part (zero_layout.h: experts split over
// ep, the dense state sharded over dp and the routed experts' over edp). The
// parameter and gradient arenas stay whole; each part is padded to equal
// aligned shards of its group, so every collective works in place.
#pragma once

#include "engine/zero_layout.h"
#include "kernels/context.h"
#include "parallel/communicator.h"

namespace trainer::engine {

// ZeRO 2: each part's gradients reduce-scattered in place in the gradient
// `arena` (flat fp32) over its group, averaged; a routed expert's average
// over edp is then divided by `ep` (parallel/expert_grad_sync.h says why).
// Only the owned ranges hold reduced gradients afterwards.
void reduce_scatter_parts(Context& ctx, const ZeroLayout& layout, Tensor arena,
                          parallel::Communicator& dense, parallel::Communicator& experts, int ep);

// ZeRO 1/2: after the update, each part's shards all-gathered in place in the
// parameter `arena` (flat fp32) over its group.
void gather_updated_parts(const ZeroLayout& layout, Tensor arena, parallel::Communicator& dense,
                          parallel::Communicator& experts);

}  // namespace trainer::engine
