// What every layer's forward/backward receives besides its tensors: the op
// context (device, stream) and the bound buffers it declared into.
#pragma once

#include "kernels/context.h"
#include "model/buffers.h"
#include "model/model_config.h"

namespace trainer::model {

struct LayerEnv {
  Context& ctx;
  const Buffers& buf;
};

}  // namespace trainer::model
