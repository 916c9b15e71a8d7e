// Norm layer over kernels/layernorm.h and kernels/rmsnorm.h.
#include "model/norm_layer.h"

#include "kernels/layernorm.h"
#include "kernels/op_scratch.h"
#include "kernels/rmsnorm.h"

namespace trainer::model {

void Norm::declare(Buffers& buf, const std::string& name, const ModelConfig& cfg, int64_t rows) {
  // Under sequence parallelism each rank normalises only its token block.
  declare(buf, name, cfg, rows, cfg.d_model, cfg.sequence_parallel);
}

void Norm::declare(Buffers& buf, const std::string& name, const ModelConfig& cfg, int64_t rows,
                   int64_t C, bool sp) {
  rms_ = cfg.is_llama();
  eps_ = cfg.norm_eps;
  buf.declare_op_scratch(norm_scratch_bytes(rows, C));  // the weight gradient's column sums
  weight_ = buf.add_param({.name = name + ".weight", .global_shape = {C}, .init = Init::ones,
                           .weight_decay = false, .sp_partial = sp},
                          {C});
  if (!rms_) {
    bias_ = buf.add_param({.name = name + ".bias", .global_shape = {C}, .init = Init::zeros,
                           .weight_decay = false, .sp_partial = sp},
                          {C});
    mean_ = buf.add(Category::activations, name + ".mean", {rows});
  }
  out_ = buf.add(Category::activations, name + ".out", {rows, C}, buf.act_dtype());
  rstd_ = buf.add(Category::activations, name + ".rstd", {rows});
}

void Norm::forward(const LayerEnv& env, Tensor in) const {
  const Buffers& b = env.buf;
  if (rms_)
    rmsnorm_forward(env.ctx, b.get(out_), b.get(rstd_), in, b.param(weight_), eps_);
  else
    layernorm_forward(env.ctx, b.get(out_), b.get(mean_), b.get(rstd_), in, b.param(weight_),
                      b.param(bias_), eps_);
}

void Norm::backward(const LayerEnv& env, Tensor dinp, Tensor dout, Tensor in) const {
  const Buffers& b = env.buf;
  if (rms_)
    rmsnorm_backward(env.ctx, dinp, b.grad(weight_), dout, in, b.param(weight_), b.get(rstd_));
  else
    layernorm_backward(env.ctx, dinp, b.grad(weight_), b.grad(bias_), dout, in, b.param(weight_),
                       b.get(mean_), b.get(rstd_));
}

}  // namespace trainer::model
