// The entry and exit of a tensor-parallel layer (attention, MLP), shared so
// each layer states once where its region ops go:
//   enter: input rows (R, C) -> all-token input (N, C)   [copy_to_tp | gather_from_sp]
//   leave: partial output (N, C) -> output rows (R, C)   [reduce_from_tp | scatter_to_sp]
// and the mirror images in backward.
#pragma once

#include "model/layer_env.h"
#include "model/scratch.h"

namespace trainer::model {

class TpIo {
 public:
  // `gathered` is the layer's saved all-token input (sequence parallel only).
  void declare(Buffers& buf, const std::string& name, const ModelConfig& cfg,
               const BatchShape& batch);
  // forward: the (N, C) input the layer's column-parallel linears read
  Tensor enter(const LayerEnv& env, Tensor in) const;
  // backward: the (N, C) input enter() returned in forward
  Tensor saved_input(const LayerEnv& env, Tensor in) const;
  // forward: where the row-parallel linear writes its partial (N, C) output
  Tensor partial_out(const LayerEnv& env, const Scratch& s, Tensor out) const;
  // forward: reduce the partial output into out (R, C)
  void leave(const LayerEnv& env, Tensor partial, Tensor out) const;
  // backward: the (N, C) gradient of the partial output, from dout (R, C)
  Tensor leave_backward(const LayerEnv& env, const Scratch& s, Tensor dout) const;
  // backward: where to accumulate the (N, C) input gradient, and a temporary of that size
  Tensor dinput(const LayerEnv& env, const Scratch& s, Tensor dinp) const;
  Tensor dinput_tmp(const LayerEnv& env, const Scratch& s) const;
  // backward: reduce the input gradient into dinp (R, C)
  void enter_backward(const LayerEnv& env, Tensor dfull, Tensor dinp) const;

 private:
  bool sp_ = false;
  BufferId gathered_ = -1;
};

}  // namespace trainer::model
