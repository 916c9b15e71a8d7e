// ZeRO-3 gathers and reduce-scatters (see sharded_params.h).
#include "engine/sharded_params.h"

#include "kernels/cuda/nvtx.h"
#include "kernels/elementwise.h"

namespace trainer::engine {

using model::Category;

ShardedParams::ShardedParams(model::Model& model, AdamW& optimizer, parallel::Communicator& dp,
                             Context& ctx, Tensor staging)
    : model_(model), optimizer_(optimizer), dp_(dp), ctx_(ctx), staging_(staging) {
  const ZeroLayout& z = optimizer.layout();
  TRAINER_CHECK(z.shards_parameters() && z.owned.size() == model.buffers().param_units().size(),
                "ShardedParams needs a ZeRO-3 layout with one range per parameter unit");
  TRAINER_CHECK(staging.numel() >= z.max_unit_shard, "ZeRO-3 staging {} below one unit shard ({})",
                staging.str(), z.max_unit_shard);
}

Tensor ShardedParams::arena_range(Category category, int unit) const {
  const model::Buffers::ParamUnit& u = model_.buffers().param_units().at(unit);
  const model::Buffers& buf = model_.buffers();
  // The arena as a flat fp32 tensor, through the unit's first parameter's base.
  TRAINER_CHECK(u.param_end > u.param_begin, "parameter unit {} is empty", unit);
  const model::Buffers::Param& p = buf.params()[u.param_begin];
  Tensor first = buf.get(category == Category::parameters ? p.value : p.grad);
  const int64_t at = static_cast<int64_t>(buf.buffers()[p.value].offset / sizeof(float));
  TRAINER_CHECK(at == u.first, "parameter unit {} starts at {}, its first parameter at {}", unit,
                u.first, at);
  return Tensor(first.data, {u.padded}, DType::f32, first.device);
}

void ShardedParams::init_parameters() {
  const ZeroLayout& z = optimizer_.layout();
  for (int u = 0; u < static_cast<int>(z.owned.size()); ++u) {
    const OwnedRange& r = z.owned[u];
    if (r.size() == 0) continue;
    model_.init_parameters(ctx_, model_.buffers().param_units()[u]);
    copy(ctx_, optimizer_.param_shards().slice(r.state_at, r.state_at + r.size()),
         arena_range(Category::parameters, u).slice(r.begin, r.end));
  }
}

void ShardedParams::gather(int unit, bool for_backward) {
  const OwnedRange& r = optimizer_.layout().owned.at(unit);
  if (r.size() == 0) return;
  cuda::NvtxRange range("zero3 gather");
  dp_.all_gather(optimizer_.param_shards().slice(r.state_at, r.state_at + r.size()),
                 arena_range(Category::parameters, unit));
  ++gathers_;
  model_.refresh_compute_weights(ctx_, model_.buffers().param_units()[unit]);
  // The shared region still holds the previous block's gradients.
  if (for_backward) fill(ctx_, arena_range(Category::gradients, unit), 0.0f);
}

void ShardedParams::update_outside_optimizer(int unit, const std::function<void()>& change) {
  gather(unit, false);
  change();
  const OwnedRange& r = optimizer_.layout().owned.at(unit);
  if (r.size() > 0)
    copy(ctx_, optimizer_.param_shards().slice(r.state_at, r.state_at + r.size()),
         arena_range(Category::parameters, unit).slice(r.begin, r.end));
}

void ShardedParams::reduce_scatter(int unit) {
  const OwnedRange& r = optimizer_.layout().owned.at(unit);
  if (r.size() == 0) return;
  cuda::NvtxRange range("zero3 reduce-scatter");
  // Averaged over dp, as ZeRO 0-2 average: each rank's loss gradient is
  // scaled by its share of the tokens. Accumulated over micro-batches.
  Tensor part = staging_.slice(0, r.size());
  dp_.reduce_scatter(arena_range(Category::gradients, unit), part, parallel::ReduceOp::avg);
  ++reduce_scatters_;
  accumulate(ctx_, optimizer_.grad_shards().slice(r.state_at, r.state_at + r.size()), part);
}

void ShardedParams::release_gradients(int unit) {
  // Norms under sequence parallelism and replicated KV heads are summed
  // over tp first, as finish_gradients does for the whole model otherwise.
  model_.finish_gradients(ctx_, model_.buffers().param_units().at(unit));
  reduce_scatter(unit);
}

void ShardedParams::gather_whole_step() {
  const auto& units = model_.buffers().param_units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    if (!units[u].shared) gather(u, false);
}

void ShardedParams::reduce_whole_step() {
  const auto& units = model_.buffers().param_units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    if (!units[u].shared) reduce_scatter(u);
}

void ShardedParams::zero_grads() {
  if (optimizer_.layout().state_elems > 0) fill(ctx_, optimizer_.grad_shards(), 0.0f);
}

}  // namespace trainer::engine
