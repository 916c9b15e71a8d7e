// MixedPrecision: the per-step parts of precision.compute the training loop
// runs around the model: fp16's dynamic loss scaling (scale the loss, find
// overflowed gradients on every rank, skip and back off), fp8's amax
// reduction and scale update after the step's last backward, and their
// state in checkpoints. fp32 and bf16 need neither (bf16 has fp32's range).
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>

#include "engine/config/job_spec.h"
#include "engine/loss_scaler.h"
#include "kernels/context.h"
#include "model/buffers.h"
#include "parallel/mesh.h"

namespace trainer::engine {

class MixedPrecision {
 public:
  explicit MixedPrecision(const PrecisionSpec& spec);

  bool loss_scaling() const { return scaler_ != nullptr; }
  // What the backward multiplies the loss by (1 without loss scaling).
  float loss_scale() const { return scaler_ ? scaler_->scale() : 1.0f; }

  // fp16, after the gradient reduction: `flag` is a (1) f32 device scratch;
  // `grads` the gradient elements this rank owns (its ZeRO shards or all).
  // Agreed over the whole world; returns true when the step must be skipped
  // (the scale has then been backed off). Without loss scaling: false.
  bool overflowed(Context& ctx, Tensor flag, std::span<const Tensor> grads, parallel::Mesh& mesh);
  int64_t skipped_steps() const { return scaler_ ? scaler_->skipped_steps() : 0; }

  // fp8, after the step's last backward: max-reduces this step's amax of
  // every fp8 operand over tp, cp and dp (a tensor is split over tp or sees
  // other tokens on other ranks; the scale must be one number everywhere, and
  // the same as one rank would compute; with ep > 1 routed experts' over tp
  // and edp), then advances the scales: all where the GEMMs run (the bound
  // fp8 state of model::Buffers), nothing read back to the host.
  static void finish_fp8_step(Context& ctx, model::Buffers& buffers, parallel::Mesh& mesh);

  // Loss-scaler state as checkpoint scalars (empty without loss scaling).
  void save(std::map<std::string, double>& scalars) const;
  void restore(const std::map<std::string, double>& scalars, const std::string& source);

 private:
  std::unique_ptr<LossScaler> scaler_;
};

}  // namespace trainer::engine
