// Region-op placement for tensor-parallel layers (see tp_io.h).
#include "model/tp_io.h"

#include "parallel/tp_regions.h"

namespace trainer::model {

void TpIo::declare(Buffers& buf, const std::string& name, const ModelConfig& cfg,
                   const BatchShape& batch) {
  sp_ = cfg.sequence_parallel;
  if (sp_) gathered_ = buf.add(Category::activations, name + ".sp_gathered", {batch.tokens(), cfg.d_model},
                                buf.act_dtype());
}

Tensor TpIo::enter(const LayerEnv& env, Tensor in) const {
  if (!sp_) return in;  // copy_to_tp: identity forward
  Tensor full = env.buf.get(gathered_);
  parallel::gather_from_sp_forward(env.tp, in, full);
  return full;
}

Tensor TpIo::saved_input(const LayerEnv& env, Tensor in) const {
  return sp_ ? env.buf.get(gathered_) : in;
}

Tensor TpIo::partial_out(const LayerEnv& env, const Scratch& s, Tensor out) const {
  return sp_ ? env.buf.get(s.full_a) : out;
}

void TpIo::leave(const LayerEnv& env, Tensor partial, Tensor out) const {
  if (sp_)
    parallel::scatter_to_sp_forward(env.tp, partial, out);
  else
    parallel::reduce_from_tp_forward(env.tp, out);
}

Tensor TpIo::leave_backward(const LayerEnv& env, const Scratch& s, Tensor dout) const {
  if (!sp_) return dout;  // reduce_from_tp: identity backward
  Tensor full = env.buf.get(s.full_a);
  parallel::scatter_to_sp_backward(env.tp, dout, full);
  return full;
}

Tensor TpIo::dinput(const LayerEnv& env, const Scratch& s, Tensor dinp) const {
  return sp_ ? env.buf.get(s.full_b) : dinp;
}

Tensor TpIo::dinput_tmp(const LayerEnv& env, const Scratch& s) const {
  return env.buf.get(sp_ ? s.full_c : s.dtmp);
}

void TpIo::enter_backward(const LayerEnv& env, Tensor dfull, Tensor dinp) const {
  if (sp_)
    parallel::gather_from_sp_backward(env.tp, dfull, dinp);
  else
    parallel::copy_to_tp_backward(env.tp, dinp);
}


}  // namespace trainer::model
