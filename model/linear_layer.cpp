// Linear layer over kernels/linear.h, with its tensor-parallel split.
#include "model/linear_layer.h"

#include "kernels/op_scratch.h"
#include "model/fp8_gemm.h"

namespace trainer::model {

void Linear::declare(Buffers& buf, const std::string& name, int64_t in, int64_t out,
                     bool has_bias, float std, Split split, const ModelConfig& cfg, int64_t rows,
                     int tp_replicas, Gelu gelu, bool tp_partial) {
  TRAINER_CHECK(tp_replicas == 1 || (split == Split::column && cfg.tp % tp_replicas == 0),
                "{}: {} tp replicas of a {} split over tp {}", name, tp_replicas,
                split == Split::column ? "column" : "non-column", cfg.tp);
  TRAINER_CHECK(!tp_partial || split == Split::none, "{}: only a replicated linear has tp-partial "
                "gradients", name);
  int64_t tp = split == Split::none ? 1 : cfg.tp / tp_replicas;
  int64_t out_local = split == Split::column ? out / tp : out;
  int64_t in_local = split == Split::row ? in / tp : in;
  TRAINER_CHECK(out_local * (split == Split::column ? tp : 1) == out &&
                    in_local * (split == Split::row ? tp : 1) == in,
                "{}: ({}, {}) does not split over tp {}", name, out, in, tp);
  int tp_dim = split == Split::column ? 0 : split == Split::row ? 1 : -1;
  weight = buf.add_param(
      {.name = name + ".weight",
       .global_shape = {out, in},
       .std = std,
       .tp_dim = tp_dim,
       .tp_replicas = tp_replicas,
       .sp_partial = tp_partial && cfg.tp > 1},
      {out_local, in_local});
  adds_bias_ = split != Split::row || cfg.tp_rank == 0;
  if (buf.fp8_active()) fp8_ = buf.add_fp8_gemm(name, false, {out_local, in_local});
  if (has_bias)
    bias = buf.add_param({.name = name + ".bias",
                          .global_shape = {out},
                          .init = Init::zeros,
                          .tp_dim = split == Split::column ? 0 : -1,
                          .tp_replicas = tp_replicas,
                          .weight_decay = false,
                          .sp_partial = tp_partial && cfg.tp > 1,
                          .compute_copy = fp8_ < 0},  // the FP8 GEMMs add an fp32 bias
                         {out_local});
  // Only the rank that adds the bias takes forward's bias scratch; every rank
  // sums its bias gradient.
  const bool fwd_bias = has_bias && adds_bias_;
  if (fp8_ >= 0) {
    declare_fp8_linear_scratch(buf, rows, out_local, fwd_bias, has_bias);
  } else {
    buf.declare_op_scratch(gelu == Gelu::after
                               ? linear_gelu_forward_scratch_bytes(rows, out_local, buf.act_dtype())
                               : linear_forward_scratch_bytes(rows, out_local, buf.act_dtype(), fwd_bias));
    buf.declare_op_scratch(gelu == Gelu::before
                               ? linear_dgelu_backward_scratch_bytes(rows, in_local, out_local,
                                                                     buf.act_dtype(), has_bias)
                               : linear_backward_scratch_bytes(rows, out_local, has_bias));
  }
}

Tensor Linear::forward_bias(const LayerEnv& env) const {
  return bias.index >= 0 && adds_bias_ ? env.buf.weight(bias) : Tensor{};
}

Tensor Linear::bias_grad(const LayerEnv& env) const {
  return bias.index >= 0 ? env.buf.grad(bias) : Tensor{};
}

void Linear::forward(const LayerEnv& env, Tensor out, Tensor in) const {
  gemm_forward(env, fp8_, out, in, env.buf.weight(weight), forward_bias(env));
}

void Linear::backward(const LayerEnv& env, Tensor dinp, Tensor dout, Tensor in) const {
  gemm_backward(env, fp8_, dinp, env.buf.grad(weight), bias_grad(env), dout, in,
                env.buf.weight(weight));
}

void Linear::forward_gelu(const LayerEnv& env, Tensor act, Tensor pre, Tensor in) const {
  gemm_gelu_forward(env, fp8_, act, pre, in, env.buf.weight(weight), forward_bias(env));
}

void Linear::backward_dgelu(const LayerEnv& env, Tensor dpre, Tensor dout, Tensor in,
                            Tensor pre) const {
  gemm_dgelu_backward(env, fp8_, dpre, env.buf.grad(weight), bias_grad(env), dout, in,
                      env.buf.weight(weight), pre);
}

}  // namespace trainer::model
