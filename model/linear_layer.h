// Linear: a weight (out, in) and optional bias. The layer owns its parameters;
// the caller owns input and output buffers (activations are saved by whoever
// produced them, so nothing is stored twice).
#pragma once

#include <string>

#include "model/layer_env.h"

namespace trainer::model {

class Linear {
 public:
  // `std` is the init standard deviation of the weight; biases start at zero.
  void declare(Buffers& buf, const std::string& name, int64_t in, int64_t out, bool bias,
               float std);
  // out (M, out) = in (M, in) @ W^T + b; written
  void forward(const LayerEnv& env, Tensor out, Tensor in) const;
  // dinp (M, in) written (skipped when empty); dW, db accumulated
  void backward(const LayerEnv& env, Tensor dinp, Tensor dout, Tensor in) const;

  ParamId weight, bias;
};

}  // namespace trainer::model
