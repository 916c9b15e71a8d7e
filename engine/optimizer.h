// AdamW over the model's parameter arena, or over one ZeRO shard of it (see
// zero_layout.h). The arena is flat (alignment gaps are zero), so a ZeRO 1/2
// shard is just an element range [begin, end); moments m and v cover exactly
// the owned elements, and the update walks the ParamSpecs that intersect them
// (weight decay is per parameter). Under ZeRO-3 the fp32 parameters and
// gradients it updates are this rank's shards (bind_shards), not the arenas.
#pragma once

#include <cstddef>

#include "engine/config/job_spec.h"
#include "engine/zero_layout.h"
#include "kernels/context.h"
#include "model/buffers.h"

namespace trainer::engine {

class AdamW {
 public:
  // Updates arena elements [begin, end); end < 0 = the whole arena.
  AdamW(const OptimizerSpec& spec, const model::Buffers& buffers, int64_t begin = 0,
        int64_t end = -1);
  AdamW(const OptimizerSpec& spec, const model::Buffers& buffers, ZeroLayout layout);

  size_t state_bytes() const;  // m and v, fp32
  // ZeRO-3: bytes of each of the parameter and gradient shards (0 otherwise).
  size_t shard_bytes() const;
  // Points m and v into `base` (state_bytes long, zeroed by the caller).
  void bind(void* base, Device device);
  // ZeRO-3: the parameter and gradient shards (shard_bytes each).
  void bind_shards(void* params, void* grads, Device device);

  void step(Context& ctx, int64_t step, float lr, float grad_scale);

  const ZeroLayout& layout() const { return layout_; }
  // ZeRO 0-2: the arena range [begin, end) it updates.
  int64_t begin() const { return layout_.owned.front().begin; }
  int64_t end() const { return layout_.owned.front().end; }
  // The part of parameter `param` it holds state for.
  OwnedPart owned(int param) const { return owned_part(layout_, buf_, param); }
  Tensor m() const { return m_; }  // (state_elems)
  Tensor v() const { return v_; }  // (state_elems)
  // ZeRO-3: this rank's fp32 parameter and gradient shards (state_elems), laid out as m.
  Tensor param_shards() const { return params_; }
  Tensor grad_shards() const { return grads_; }

 private:
  OptimizerSpec spec_;
  const model::Buffers& buf_;
  ZeroLayout layout_;
  Tensor m_, v_, params_, grads_;
};

}  // namespace trainer::engine
