// Scratch: gradient temporaries shared by all layers during backward. They are
// live only inside one layer's backward (or carry the residual gradient
// between blocks), so one set serves the whole model.
#pragma once

#include "model/buffers.h"
#include "model/model_config.h"

namespace trainer::model {

struct Scratch {
  BufferId dres = -1;  // (N, C) gradient of the residual stream, updated in place block by block
  BufferId dln = -1;   // (N, C) gradient arriving at a norm's output
  BufferId dtmp = -1;  // (N, C) a layer's partial input gradient before it is accumulated
  BufferId dq = -1;    // (N, H*D)
  BufferId dk = -1;    // (N, Hkv*D)
  BufferId dv = -1;    // (N, Hkv*D)
  BufferId datt = -1;  // (N, H*D)
  BufferId dff1 = -1;  // (N, F)
  BufferId dff2 = -1;  // (N, F) llama only: SwiGLU's gate gradient
  BufferId dff3 = -1;  // (N, F) llama only: SwiGLU's up gradient

  void declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch);
};

}  // namespace trainer::model
