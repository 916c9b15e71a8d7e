// MLP: GPT-2's fc -> GELU -> proj, or Llama's SwiGLU (gate, up) -> down; the
// first linears column-parallel, the last row-parallel. Saves the hidden
// pre-activations and the activation output.
#pragma once

#include <string>

#include "model/linear_layer.h"
#include "model/scratch.h"
#include "model/tp_io.h"

namespace trainer::model {

class Mlp {
 public:
  void declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
               const BatchShape& batch);
  // out (R, C) = mlp(in (R, C)); written
  void forward(const LayerEnv& env, const Scratch& s, Tensor out, Tensor in) const;
  // dinp (R, C) written; parameter gradients accumulated
  void backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout, Tensor in) const;

 private:
  bool swiglu_ = false;
  TpIo io_;
  Linear fc_, up_, proj_;   // gpt2: c_fc, c_proj; llama: gate_proj (fc_), up_proj, down_proj
  BufferId pre_ = -1;       // (N, F_local) fc / gate output
  BufferId up_out_ = -1;    // (N, F_local) llama: up output
  BufferId act_ = -1;       // (N, F_local) GELU or SwiGLU output
};

}  // namespace trainer::model
