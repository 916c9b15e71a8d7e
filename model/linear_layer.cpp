// Linear layer over kernels/linear.h.
#include "model/linear_layer.h"

#include "kernels/linear.h"

namespace trainer::model {

void Linear::declare(Buffers& buf, const std::string& name, int64_t in, int64_t out,
                     bool has_bias, float std) {
  weight = buf.add_param({.name = name + ".weight", .global_shape = {out, in}, .std = std},
                         {out, in});
  if (has_bias)
    bias = buf.add_param({.name = name + ".bias", .global_shape = {out}, .init = Init::zeros,
                          .weight_decay = false},
                         {out});
}

void Linear::forward(const LayerEnv& env, Tensor out, Tensor in) const {
  Tensor b = bias.index >= 0 ? env.buf.param(bias) : Tensor{};
  linear_forward(env.ctx, out, in, env.buf.param(weight), b);
}

void Linear::backward(const LayerEnv& env, Tensor dinp, Tensor dout, Tensor in) const {
  Tensor db = bias.index >= 0 ? env.buf.grad(bias) : Tensor{};
  linear_backward(env.ctx, dinp, env.buf.grad(weight), db, dout, in, env.buf.param(weight));
}

}  // namespace trainer::model
