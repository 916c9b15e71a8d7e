// AdamW over the model's parameter arena, or over one ZeRO shard of it. The
// arena is flat (alignment gaps are zero), so a shard is just an element range
// [begin, end); moments m and v cover exactly that range, and the update walks
// the ParamSpecs that intersect it (weight decay is per parameter).
#pragma once

#include <cstddef>

#include "engine/config/job_spec.h"
#include "kernels/context.h"
#include "model/buffers.h"

namespace trainer::engine {

class AdamW {
 public:
  // Updates arena elements [begin, end); end < 0 = the whole arena.
  AdamW(const OptimizerSpec& spec, const model::Buffers& buffers, int64_t begin = 0,
        int64_t end = -1);

  size_t state_bytes() const;  // m and v, fp32
  // Points m and v into `base` (state_bytes long, zeroed by the caller).
  void bind(void* base, Device device);

  void step(Context& ctx, int64_t step, float lr, float grad_scale);

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  Tensor m() const { return m_; }  // (end - begin)
  Tensor v() const { return v_; }  // (end - begin)

 private:
  OptimizerSpec spec_;
  const model::Buffers& buf_;
  int64_t begin_ = 0, end_ = 0;
  Tensor m_, v_;
};

}  // namespace trainer::engine
