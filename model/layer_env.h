// What every layer's forward/backward receives besides its tensors: the op
// context (device, stream) and the bound buffers it declared into.
#pragma once

#include "kernels/context.h"
#include "model/buffers.h"
#include "model/model_config.h"
#include "parallel/communicator.h"

namespace trainer::model {

struct LayerEnv {
  Context& ctx;
  const Buffers& buf;
  parallel::Communicator& tp;  // the tensor-parallel group (one rank when tp = 1)
  parallel::Communicator* ep = nullptr;  // the expert-parallel group (MoE with ep > 1 only)
  // A forward run again just before its backward (full recomputation): same
  // outputs, but per-step counters must not count it twice.
  bool recompute = false;
  parallel::Communicator* cp = nullptr;  // the context-parallel group (cp > 1 only)
  // Documents packed into a sequence (ModelConfig::doc_masking,
  // reset_positions): the running chunk's per-token (N) int32 document starts
  // and positions, in local token order; empty when off.
  Tensor doc_start{};
  Tensor positions{};
};

}  // namespace trainer::model
