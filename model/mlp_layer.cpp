// MLP layer for both families.
#include "model/mlp_layer.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/swiglu.h"

namespace trainer::model {

void Mlp::declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
                  const BatchShape& batch) {
  swiglu_ = cfg.is_llama();
  int64_t N = batch.tokens(), C = cfg.d_model, F = cfg.d_ff, Fl = cfg.local_ff();
  float out_std = cfg.init_std / std::sqrt(2.0f * cfg.n_layer);
  std::string p = prefix + ".mlp.";
  io_.declare(buf, p + "input", cfg, batch);
  if (swiglu_) {
    fc_.declare(buf, p + "gate_proj", C, F, false, cfg.init_std, Split::column, cfg, N);
    up_.declare(buf, p + "up_proj", C, F, false, cfg.init_std, Split::column, cfg, N);
    proj_.declare(buf, p + "down_proj", F, C, false, out_std, Split::row, cfg, N);
    up_out_ = buf.add(Category::activations, p + "up", {N, Fl}, buf.act_dtype());
  } else {
    fc_.declare(buf, p + "c_fc", C, F, true, cfg.init_std, Split::column, cfg, N, 1, Gelu::after);
    proj_.declare(buf, p + "c_proj", F, C, true, out_std, Split::row, cfg, N, 1, Gelu::before);
  }
  pre_ = buf.add(Category::activations, p + "pre_activation", {N, Fl}, buf.act_dtype());
  act_ = buf.add(Category::activations, p + "activation", {N, Fl}, buf.act_dtype());
}

void Mlp::forward(const LayerEnv& env, const Scratch& s, Tensor out, Tensor in) const {
  const Buffers& b = env.buf;
  Tensor x = io_.enter(env, in);
  if (swiglu_) {
    fc_.forward(env, b.get(pre_), x);
    up_.forward(env, b.get(up_out_), x);
    swiglu_forward(env.ctx, b.get(act_), b.get(pre_), b.get(up_out_));
  } else {
    fc_.forward_gelu(env, b.get(act_), b.get(pre_), x);
  }
  Tensor partial = io_.partial_out(env, s, out);
  proj_.forward(env, partial, b.get(act_));
  io_.leave(env, partial, out);
}

void Mlp::backward(const LayerEnv& env, const Scratch& s, Tensor dinp, Tensor dout,
                   Tensor in) const {
  const Buffers& b = env.buf;
  Tensor g = io_.leave_backward(env, s, dout);
  Tensor dh = b.get(s.dff1);
  if (swiglu_)
    proj_.backward(env, dh, g, b.get(act_));
  else
    proj_.backward_dgelu(env, dh, g, b.get(act_), b.get(pre_));  // dh: the pre-activation's gradient
  Tensor x = io_.saved_input(env, in);
  Tensor dx = io_.dinput(env, s, dinp);
  if (swiglu_) {
    Tensor dgate = b.get(s.dff2), dup = b.get(s.dff3);
    swiglu_backward(env.ctx, dgate, dup, dh, b.get(pre_), b.get(up_out_));
    fc_.backward(env, dx, dgate, x);
    Tensor tmp = io_.dinput_tmp(env, s);
    up_.backward(env, tmp, dup, x);
    accumulate(env.ctx, dx, tmp);
  } else {
    fc_.backward(env, dx, dh, x);
  }
  io_.enter_backward(env, dx, dinp);
}

}  // namespace trainer::model
