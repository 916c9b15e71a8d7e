// AdamW over the model's parameter arena, or over one ZeRO shard of it (see
// zero_layout.h). The arena is flat (alignment gaps are zero), so a ZeRO
// shard is an element range [begin, end), or one per unit part; moments m and
// v cover exactly the owned elements, and the update walks the ParamSpecs that intersect them
// (weight decay is per parameter). Under ZeRO-3 the fp32 parameters and
// gradients it updates are this rank's shards (bind_shards), not the arenas;
// under ZeRO-2 over > 1 rank the gradients are (the parameters are the arena's).
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
  // Bytes of the parameter shard (ZeRO-3) and of the gradient shard (ZeRO-3,
  // ZeRO-2 over > 1 rank); 0 otherwise.
  size_t param_shard_bytes() const;
  size_t grad_shard_bytes() const;
  // Points m and v into `base` (state_bytes long, zeroed by the caller).
  void bind(void* base, Device device);
  // The parameter and gradient shards (param_shard_bytes, grad_shard_bytes).
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
  // This rank's fp32 parameter (ZeRO-3) and gradient (ZeRO-2/3) shards
  // (state_elems each), laid out as m.
  Tensor param_shards() const { return params_; }
  Tensor grad_shards() const { return grads_; }

 private:
  OptimizerSpec spec_;
  const model::Buffers& buf_;
  ZeroLayout layout_;
  Tensor m_, v_, params_, grads_;
};

}  // namespace trainer::engine
