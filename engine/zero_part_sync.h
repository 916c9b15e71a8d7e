// The parameter all-gather of ZeRO 1/2 by unit part (zero_layout.h: ZeRO-2
// over > 1 rank; ZeRO 1 with experts split over ep, the dense state sharded
// over dp and the routed experts' over edp). The parameter arena stays whole;
// each part is padded to equal aligned shards of its group, so the all-gather
// works in place. (ZeRO-2's gradients: engine/sharded_params.h.)
#pragma once

#include "engine/zero_layout.h"
#include "kernels/context.h"
#include "parallel/communicator.h"

namespace trainer::engine {

// After the update, each part's shards all-gathered in place in the
// parameter `arena` (flat fp32) over its group.
void gather_updated_parts(const ZeroLayout& layout, Tensor arena, parallel::Communicator& dense,
                          parallel::Communicator& experts);

}  // namespace trainer::engine
