// ZeRO-3 gathers and ZeRO-2/3 reduce-scatters (see sharded_params.h).
#include "engine/sharded_params.h"

#include "engine/zero_part_sync.h"
#include "kernels/cuda/nvtx.h"
#include "kernels/elementwise.h"

namespace trainer::engine {

using model::Category;

ShardedParams::ShardedParams(model::Model& model, AdamW& optimizer, parallel::Communicator& dp,
                             parallel::Communicator& edp, Context& ctx, Tensor staging)
    : model_(model), optimizer_(optimizer), dp_(dp), edp_(edp), ctx_(ctx), staging_(staging),
      whole_params_(!optimizer.layout().shards_parameters()) {
  const ZeroLayout& z = optimizer.layout();
  TRAINER_CHECK(z.shards_gradients() &&
                    z.unit_begin.size() == model.buffers().param_units().size() + 1,
                "ShardedParams needs a ZeRO-2/3 layout of every parameter unit");
  TRAINER_CHECK(staging.numel() >= z.max_unit_shard, "ZeRO-3 staging {} below one unit shard ({})",
                staging.str(), z.max_unit_shard);
  TRAINER_CHECK(dp.size() % edp.size() == 0, "ZeRO-3: expert group of {} ranks within dp {}",
                edp.size(), dp.size());
}

Tensor ShardedParams::arena_part(Category category, int unit, int part) const {
  const model::Buffers& buf = model_.buffers();
  const model::Buffers::ParamUnit& u = buf.param_units().at(unit);
  const model::Buffers::ParamUnit::Part& pt = u.parts.at(part);
  // The arena as a flat fp32 tensor, through the unit's first parameter's base.
  TRAINER_CHECK(u.param_end > u.param_begin, "parameter unit {} is empty", unit);
  const model::Buffers::Param& p = buf.params()[u.param_begin];
  Tensor first = buf.get(category == Category::parameters ? p.value : p.grad);
  const int64_t at = static_cast<int64_t>(buf.buffers()[p.value].offset / sizeof(float));
  TRAINER_CHECK(at == u.first, "parameter unit {} starts at {}, its first parameter at {}", unit,
                u.first, at);
  return Tensor(static_cast<float*>(first.data) + (pt.first - u.first), {pt.padded}, DType::f32,
                first.device);
}

void ShardedParams::keep_shards(int unit) {
  if (whole_params_) return;
  std::span<const OwnedRange> parts = optimizer_.layout().unit_parts(unit);
  for (int k = 0; k < static_cast<int>(parts.size()); ++k) {
    const OwnedRange& r = parts[k];
    if (r.size() > 0)
      copy(ctx_, optimizer_.param_shards().slice(r.state_at, r.state_at + r.size()),
           arena_part(Category::parameters, unit, k).slice(r.begin, r.end));
  }
}

void ShardedParams::init_parameters() {
  if (whole_params_) return model_.init_parameters(ctx_);
  const auto& units = model_.buffers().param_units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (units[u].param_end == units[u].param_begin) continue;
    model_.init_parameters(ctx_, units[u]);
    keep_shards(u);
  }
}

void ShardedParams::gather(int unit, bool for_backward) {
  std::span<const OwnedRange> parts = optimizer_.layout().unit_parts(unit);
  if (whole_params_) {  // ZeRO-2: the shared region still holds the previous block's gradients
    if (for_backward)
      for (int k = 0; k < static_cast<int>(parts.size()); ++k)
        fill(ctx_, arena_part(Category::gradients, unit, k), 0.0f);
    return;
  }
  bool any = false;
  for (int k = 0; k < static_cast<int>(parts.size()); ++k) {
    const OwnedRange& r = parts[k];
    if (r.size() == 0) continue;
    cuda::NvtxRange range("zero3 gather");
    group(r).all_gather(optimizer_.param_shards().slice(r.state_at, r.state_at + r.size()),
                        arena_part(Category::parameters, unit, k));
    ++gathers_;
    // The shared region still holds the previous block's gradients.
    if (for_backward) fill(ctx_, arena_part(Category::gradients, unit, k), 0.0f);
    any = true;
  }
  if (any) model_.refresh_compute_weights(ctx_, model_.buffers().param_units()[unit]);
}

void ShardedParams::update_outside_optimizer(int unit, const std::function<void()>& change) {
  if (whole_params_) return change();
  gather(unit, false);
  change();
  keep_shards(unit);
}

void ShardedParams::reduce_scatter(int unit) {
  std::span<const OwnedRange> parts = optimizer_.layout().unit_parts(unit);
  for (int k = 0; k < static_cast<int>(parts.size()); ++k) {
    const OwnedRange& r = parts[k];
    if (r.size() == 0) continue;
    cuda::NvtxRange range("zero3 reduce-scatter");
    // Averaged over dp, as ZeRO 0-2 average: each rank's loss gradient is
    // scaled by its share of the tokens. Accumulated over micro-batches.
    Tensor part = staging_.slice(0, r.size());
    parallel::Communicator& g = group(r);
    g.reduce_scatter(arena_part(Category::gradients, unit, k), part, parallel::ReduceOp::avg);
    ++reduce_scatters_;
    // An expert's gradient on a rank already sums what the tokens of all its
    // ep peers sent it: the sum over edp covers every token once, so the
    // average is avg_edp / ep (as parallel::ExpertGradReducer scales it).
    if (r.expert && edp_.size() < dp_.size())
      scale(ctx_, part, 1.0f / static_cast<float>(dp_.size() / edp_.size()));
    accumulate(ctx_, optimizer_.grad_shards().slice(r.state_at, r.state_at + r.size()), part);
  }
}

void ShardedParams::release_gradients(int unit) {
  // Norms under sequence parallelism and replicated KV heads are summed
  // over tp first, as finish_gradients does for the whole model otherwise.
  model_.finish_gradients(ctx_, model_.buffers().param_units().at(unit));
  reduce_scatter(unit);
}

void ShardedParams::gather_whole_step() {
  if (whole_params_) {
    const model::Buffers& buf = model_.buffers();
    Tensor first = buf.get(buf.params().front().value);
    const auto n = static_cast<int64_t>(buf.category_bytes(Category::parameters) / sizeof(float));
    gather_updated_parts(optimizer_.layout(), Tensor(first.data, {n}, DType::f32, first.device),
                         dp_, edp_);
    model_.refresh_compute_weights(ctx_);
    return;
  }
  const auto& units = model_.buffers().param_units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    if (!units[u].shared) gather(u, false);
}

void ShardedParams::reduce_whole_step() {
  const auto& units = model_.buffers().param_units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    if (!units[u].grads_shared) reduce_scatter(u);
}

void ShardedParams::zero_grads() {
  if (optimizer_.layout().state_elems > 0) fill(ctx_, optimizer_.grad_shards(), 0.0f);
}

}  // namespace trainer::engine
