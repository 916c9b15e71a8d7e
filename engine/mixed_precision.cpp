// Loss scaling and fp8 scale updates around the training step.
#include "engine/mixed_precision.h"

#include "kernels/cast.h"
#include "kernels/elementwise.h"
#include "kernels/memory.h"
#include "parallel/grad_sync.h"

namespace trainer::engine {

MixedPrecision::MixedPrecision(const PrecisionSpec& spec) {
  if (spec.compute == ComputeDtype::fp16)
    scaler_ = std::make_unique<LossScaler>(loss_scaler_options(spec));
}

bool MixedPrecision::overflowed(Context& ctx, Tensor flag, std::span<const Tensor> grads,
                                parallel::Mesh& mesh) {
  if (!scaler_) return false;
  fill(ctx, flag, 0.0f);
  for (const Tensor& g : grads) found_nonfinite(ctx, flag, g);
  float local = 0;
  copy_to_host(&local, flag);
  // Every rank must take the same decision, or the optimizer steps diverge.
  bool any = parallel::group_sum(mesh.comm(parallel::Axis::world), local != 0 ? 1.0 : 0.0) > 0;
  return scaler_->update(any);
}

void MixedPrecision::finish_fp8_step(Context& ctx, model::Buffers& buffers, parallel::Mesh& mesh) {
  Fp8Scaling* f = buffers.fp8();
  if (!f || f->size() == 0) return;
  auto reduce = [&](Tensor t, std::initializer_list<parallel::Axis> axes) {
    for (parallel::Axis axis : axes) {
      parallel::Communicator& c = mesh.comm(axis);
      if (c.size() > 1 && t.numel() > 0) c.all_reduce(t, parallel::ReduceOp::max);
    }
  };
  // Every replica must take the same scales: cp ranks saw other tokens too.
  // With ep > 1 a routed expert's operands are reduced apart: the same index
  // holds another expert on another ep rank. Their group is the ranks holding
  // the same experts (tp x edp: every token the expert saw); with ep 1 that
  // is the dense operands' group, and one reduction serves both. The bound
  // state keeps the experts' amaxes after the dense ones, so each group's are
  // one contiguous range.
  using Ops = model::Buffers::Fp8Operands;
  const bool apart = mesh.shape().ep > 1;
  reduce(buffers.fp8_amaxes(apart ? Ops::dense : Ops::all),
         {parallel::Axis::tp, parallel::Axis::cp, parallel::Axis::dp});
  if (apart) reduce(buffers.fp8_amaxes(Ops::experts), {parallel::Axis::tp, parallel::Axis::edp});
  buffers.fp8_update(ctx);
}

void MixedPrecision::save(std::map<std::string, double>& scalars) const {
  if (!scaler_) return;
  scalars["loss_scale"] = scaler_->scale();
  scalars["loss_scale_good_steps"] = double(scaler_->good_steps());
  scalars["loss_scale_skipped_steps"] = double(scaler_->skipped_steps());
  scalars["loss_scale_consecutive_skips"] = double(scaler_->consecutive_skips());
}

void MixedPrecision::restore(const std::map<std::string, double>& scalars,
                             const std::string& source) {
  if (!scaler_) return;
  auto it = scalars.find("loss_scale");
  if (it == scalars.end()) return;  // saved in another precision: start from the job's scale
  auto get = [&](const char* k) {
    auto i = scalars.find(k);
    return i == scalars.end() ? int64_t(0) : static_cast<int64_t>(i->second);
  };
  scaler_->set_state(static_cast<float>(it->second), get("loss_scale_good_steps"),
                     get("loss_scale_skipped_steps"), get("loss_scale_consecutive_skips"), source);
}

}  // namespace trainer::engine
