// Scratch: gradient temporaries shared by all layers during backward. They are
// live only inside one layer's backward (or carry the residual gradient
// between blocks), so one set serves the whole model.
#pragma once

#include "model/buffers.h"
#include "model/model_config.h"

namespace trainer::model {

struct Scratch {
  // Residual-stream sized: (rows, C), rows = N, or N / tp under sequence parallelism.
  BufferId dres = -1;  // gradient of the residual stream, updated in place block by block
  BufferId dln = -1;   // gradient arriving at a norm's output
  BufferId dtmp = -1;  // a layer's partial input gradient before it is accumulated
  // Local heads and MLP columns of all N tokens.
  BufferId dq = -1;    // (N, H_local*D)
  BufferId dk = -1;    // (N, Hkv_local*D)
  BufferId dv = -1;    // (N, Hkv_local*D)
  BufferId datt = -1;  // (N, H_local*D)
  BufferId dff1 = -1;  // (N, F_local)
  BufferId dff2 = -1;  // (N, F_local) llama only: SwiGLU's gate gradient
  BufferId dff3 = -1;  // (N, F_local) llama only: SwiGLU's up gradient
  // Sequence parallelism only: all-token (N, C) buffers around the gathers.
  BufferId full_a = -1, full_b = -1, full_c = -1;
  // Context parallelism only, each (B, T_global, Hkv_local, D): the whole
  // sequence's keys and values (gathered in forward, again in backward), and
  // two pairs of their gradients (one per local query chunk; the second pair
  // also stages the collectives' rank-blocked order).
  BufferId cp_k = -1, cp_v = -1, cp_dk = -1, cp_dv = -1, cp_dk2 = -1, cp_dv2 = -1;
  // Multi-head latent attention only (model/mla_layer.h), forward and backward
  // temporaries: kv_b's output or its gradient (N, H_local * (qk_nope + v));
  // the KV latent with its RoPE part or its gradient (N, kv_lora + qk_rope);
  // two latent-wide gradients (N, max(q_lora, kv_lora)); RoPE parts taken
  // out of the heads to be turned (N, H_local * qk_rope).
  BufferId mla_kv = -1, mla_latent = -1, mla_grad_a = -1, mla_grad_b = -1, mla_rope = -1;

  void declare(Buffers& buf, const ModelConfig& cfg, const BatchShape& batch);
};

}  // namespace trainer::model
