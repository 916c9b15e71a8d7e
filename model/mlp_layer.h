// MLP: GPT-2's fc -> GELU -> proj, or Llama's SwiGLU (gate, up) -> down.
// Saves the hidden pre-activations and the activation output.
#pragma once

#include <string>

#include "model/linear_layer.h"
#include "model/scratch.h"

namespace trainer::model {

class Mlp {
 public:
  void declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
               const BatchShape& batch);
  // out (N, C) = mlp(in (N, C)); written
  void forward(const LayerEnv& env, Tensor out, Tensor in) const;
  // dinp (N, C) written; parameter gradients accumulated
  void backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout, Tensor in) const;

 private:
  bool swiglu_ = false;
  Linear fc_, up_, proj_;   // gpt2: c_fc, c_proj; llama: gate_proj (fc_), up_proj, down_proj
  BufferId pre_ = -1;       // (N, F) fc / gate output
  BufferId up_out_ = -1;    // (N, F) llama: up output
  BufferId act_ = -1;       // (N, F) GELU or SwiGLU output
};

}  // namespace trainer::model
