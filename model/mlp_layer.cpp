// MLP layer for both families.
#include "model/mlp_layer.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/swiglu.h"

namespace trainer::model {

void Mlp::declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
                  const BatchShape& batch) {
  swiglu_ = cfg.is_llama();
  int64_t N = batch.B * batch.T, C = cfg.d_model, F = cfg.d_ff;
  float out_std = cfg.init_std / std::sqrt(2.0f * cfg.n_layer);
  std::string p = prefix + ".mlp.";
  if (swiglu_) {
    fc_.declare(buf, p + "gate_proj", C, F, false, cfg.init_std);
    up_.declare(buf, p + "up_proj", C, F, false, cfg.init_std);
    proj_.declare(buf, p + "down_proj", F, C, false, out_std);
    up_out_ = buf.add(Category::activations, p + "up", {N, F});
  } else {
    fc_.declare(buf, p + "c_fc", C, F, true, cfg.init_std);
    proj_.declare(buf, p + "c_proj", F, C, true, out_std);
  }
  pre_ = buf.add(Category::activations, p + "pre_activation", {N, F});
  act_ = buf.add(Category::activations, p + "activation", {N, F});
}

void Mlp::forward(const LayerEnv& env, Tensor out, Tensor in) const {
  const Buffers& b = env.buf;
  fc_.forward(env, b.get(pre_), in);
  if (swiglu_) {
    up_.forward(env, b.get(up_out_), in);
    swiglu_forward(env.ctx, b.get(act_), b.get(pre_), b.get(up_out_));
  } else {
    gelu_forward(env.ctx, b.get(act_), b.get(pre_));
  }
  proj_.forward(env, out, b.get(act_));
}

void Mlp::backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout,
                   Tensor in) const {
  const Buffers& b = env.buf;
  Tensor dh = b.get(s.dff1);
  proj_.backward(env, dh, dout, b.get(act_));
  if (swiglu_) {
    Tensor dgate = b.get(s.dff2), dup = b.get(s.dff3);
    swiglu_backward(env.ctx, dgate, dup, dh, b.get(pre_), b.get(up_out_));
    fc_.backward(env, dinp, dgate, in);
    Tensor tmp = b.get(s.dtmp);
    up_.backward(env, tmp, dup, in);
    accumulate(env.ctx, dinp, tmp);
  } else {
    gelu_backward(env.ctx, dh, dh, b.get(pre_));
    fc_.backward(env, dinp, dh, in);
  }
}

}  // namespace trainer::model
