// AdamW over the model's parameter arena. Moments m and v mirror the
// parameter arena's layout, so each parameter's state sits at the same offset
// and the whole update is a walk over ParamSpecs (weight decay per spec).
#pragma once

#include <cstddef>

#include "engine/config/job_spec.h"
#include "kernels/context.h"
#include "model/buffers.h"

namespace trainer::engine {

class AdamW {
 public:
  AdamW(const OptimizerSpec& spec, const model::Buffers& buffers);

  size_t state_bytes() const;  // m and v, fp32
  // Points m and v into `base` (state_bytes long, zeroed by the caller).
  void bind(void* base, Device device);

  void step(Context& ctx, int64_t step, float lr, float grad_scale);

  Tensor m() const { return m_; }
  Tensor v() const { return v_; }

 private:
  OptimizerSpec spec_;
  const model::Buffers& buf_;
  Tensor m_, v_;  // flat, each the size of the parameter arena
};

}  // namespace trainer::engine
