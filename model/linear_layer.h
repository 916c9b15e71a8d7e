// Linear: a weight (out, in) and optional bias, whole or split for tensor
// parallelism: column-parallel splits the outputs (weight and bias rows),
// row-parallel splits the inputs (weight columns; its outputs are partial sums
// the caller reduces, and the replicated bias is added by tp rank 0 only so
// the reduction counts it once). The caller owns input and output buffers and
// places the region ops around the layer.
#pragma once

#include <string>

#include "model/layer_env.h"

namespace trainer::model {

enum class Split { none, column, row };

// GPT-2's MLP fuses GELU into its linears (kernels/linear_gelu.h): `after` for the
// layer whose output GELU takes (c_fc: forward_gelu), `before` for the one that
// reads GELU's output (c_proj: backward_dgelu). FP8 layers compose the plain ops.
enum class Gelu { none, after, before };

class Linear {
 public:
  // in/out are global sizes; `std` is the init standard deviation of the weight.
  // tp_replicas (column split only): consecutive tp ranks sharing one shard, so
  // out splits over tp / tp_replicas shards (KV heads when n_kv_head < tp).
  // rows: the M of its GEMMs, for the op scratch they take (Buffers::declare_op_scratch).
  // tp_partial (Split::none only): a replicated layer inside a tp region whose
  // output gradient on each tp rank covers only that rank's heads (MLA's
  // down-projections): its weight gradients are summed over tp.
  void declare(Buffers& buf, const std::string& name, int64_t in, int64_t out, bool bias,
               float std, Split split, const ModelConfig& cfg, int64_t rows,
               int tp_replicas = 1, Gelu gelu = Gelu::none, bool tp_partial = false);
  // out (M, out_local) = in (M, in_local) @ W^T + b; written
  void forward(const LayerEnv& env, Tensor out, Tensor in) const;
  // dinp (M, in_local) written (skipped when empty); dW, db accumulated
  void backward(const LayerEnv& env, Tensor dinp, Tensor dout, Tensor in) const;
  // Gelu::after: pre = in @ W^T + b, act = gelu(pre); both written
  void forward_gelu(const LayerEnv& env, Tensor act, Tensor pre, Tensor in) const;
  // Gelu::before, for in = gelu(pre): dpre = (dout @ W) * gelu'(pre) written; dW, db accumulated
  void backward_dgelu(const LayerEnv& env, Tensor dpre, Tensor dout, Tensor in, Tensor pre) const;

  ParamId weight, bias;

 private:
  Tensor forward_bias(const LayerEnv& env) const;  // empty on row-parallel ranks but tp 0
  Tensor bias_grad(const LayerEnv& env) const;
  bool adds_bias_ = true;
  int fp8_ = -1;  // index of the input in Buffers::fp8(), -1 = not an fp8 GEMM
};

}  // namespace trainer::model
