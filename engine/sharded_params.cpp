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
      whole_params_(!optimizer.layout().shards_parameters()), regions_(optimizer.layout().regions) {
  const ZeroLayout& z = optimizer.layout();
  TRAINER_CHECK(z.shards_gradients() &&
                    z.unit_begin.size() == model.buffers().param_units().size() + 1,
                "ShardedParams needs a ZeRO-2/3 layout of every parameter unit");
  TRAINER_CHECK(staging.numel() >= z.staging_elems(), "ZeRO staging {} below {} elements",
                staging.str(), z.staging_elems());
  if (regions_ == 2) {
    std::vector<parallel::Communicator*> comms{&dp};
    if (&edp != &dp) comms.push_back(&edp);
    fences_ = std::make_unique<parallel::CommStreamOverlap>(ctx, std::move(comms), 2);
  }
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
  forget_gathered();
}

void ShardedParams::all_gather(int unit) {
  std::span<const OwnedRange> parts = optimizer_.layout().unit_parts(unit);
  for (int k = 0; k < static_cast<int>(parts.size()); ++k) {
    const OwnedRange& r = parts[k];
    if (r.size() == 0) continue;
    cuda::NvtxRange range("zero3 gather");
    group(r).all_gather(optimizer_.param_shards().slice(r.state_at, r.state_at + r.size()),
                        arena_part(Category::parameters, unit, k));
    ++gathers_;
  }
}

void ShardedParams::zero_unit_grads(int unit) {
  // The shared region still holds another block's gradients.
  const int n = static_cast<int>(optimizer_.layout().unit_parts(unit).size());
  for (int k = 0; k < n; ++k) fill(ctx_, arena_part(Category::gradients, unit, k), 0.0f);
}

void ShardedParams::gather(int unit, bool for_backward) {
  if (regions_ == 2) return gather_overlapped(unit, for_backward);
  if (for_backward) zero_unit_grads(unit);
  if (whole_params_) return;  // ZeRO-2: nothing to gather
  if (resident_[0] != unit) {
    all_gather(unit);
    resident_[0] = unit;
    fresh_[0] = -1;
  }
  refresh(unit, 0);
}

void ShardedParams::refresh(int unit, int region) {
  if (fresh_[region] == unit) return;
  model_.refresh_compute_weights(ctx_, model_.buffers().param_units()[unit]);
  fresh_[region] = unit;
}

void ShardedParams::forget_gathered() {
  resident_ = {-1, -1};
  fresh_ = {-1, -1};
}

int ShardedParams::next_block(int unit, bool for_backward) const {
  const auto& units = model_.buffers().param_units();
  const int n = for_backward ? unit - 1 : unit + 1;
  return n >= 0 && n < static_cast<int>(units.size()) && units[n].grads_shared ? n : -1;
}

void ShardedParams::gather_overlapped(int unit, bool for_backward) {
  if (whole_params_ && !for_backward) return;  // ZeRO-2's forward: nothing to do
  const int region = model_.buffers().param_units().at(unit).region;
  if (!whole_params_ && resident_[region] != unit) {
    fences_->begin();
    all_gather(unit);
    fences_->end(region);
    resident_[region] = unit;
    fresh_[region] = -1;
  }
  // The region's gather and its last reduce-scatter (issued before it).
  fences_->wait(region);
  land(region);
  if (for_backward) zero_unit_grads(unit);
  if (whole_params_) return;
  refresh(unit, region);
  const int next = next_block(unit, for_backward);
  if (next < 0) return;
  // Its region was last used by the block before this one, all queued on
  // the compute stream by now: begin() makes the gather wait for it.
  const int next_region = model_.buffers().param_units()[next].region;
  TRAINER_CHECK(next_region != region, "blocks {} and {} share a region", unit, next);
  if (resident_[next_region] == next) return;  // still there (the turn between forward and backward)
  fences_->begin();
  all_gather(next);
  fences_->end(next_region);
  resident_[next_region] = next;
  fresh_[next_region] = -1;
}

void ShardedParams::update_outside_optimizer(int unit, const std::function<void()>& change) {
  if (whole_params_) return change();
  drain();
  forget_gathered();
  all_gather(unit);
  model_.refresh_compute_weights(ctx_, model_.buffers().param_units()[unit]);
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
    group(r).reduce_scatter(arena_part(Category::gradients, unit, k), part, parallel::ReduceOp::avg);
    ++reduce_scatters_;
    add_to_shard(r, part);
  }
}

void ShardedParams::add_to_shard(const OwnedRange& r, Tensor part) {
  // An expert's gradient on a rank already sums what the tokens of all its
  // ep peers sent it: the sum over edp covers every token once, so the
  // average is avg_edp / ep (as parallel::ExpertGradReducer scales it).
  if (r.expert && edp_.size() < dp_.size())
    scale(ctx_, part, 1.0f / static_cast<float>(dp_.size() / edp_.size()));
  accumulate(ctx_, optimizer_.grad_shards().slice(r.state_at, r.state_at + r.size()), part);
}

void ShardedParams::release_gradients(int unit) {
  // Norms under sequence parallelism and replicated KV heads are summed
  // over tp first, as finish_gradients does for the whole model otherwise.
  model_.finish_gradients(ctx_, model_.buffers().param_units().at(unit));
  if (regions_ == 2)
    reduce_scatter_overlapped(unit);
  else
    reduce_scatter(unit);
}

Tensor ShardedParams::staged(int region, std::span<const OwnedRange> parts,
                             const OwnedRange& r) const {
  // A unit's parts are back to back in the state (zero_layout), so in its staging too.
  const int64_t at = region * optimizer_.layout().max_unit_state + (r.state_at - parts.front().state_at);
  return staging_.slice(at, at + r.size());
}

void ShardedParams::reduce_scatter_overlapped(int unit) {
  const int region = model_.buffers().param_units().at(unit).region;
  // land() ran when this block's backward began (gather_overlapped).
  TRAINER_CHECK(scattered_[region] < 0, "ZeRO: unit {}'s reduce-scatter over unit {}'s unlanded",
                unit, scattered_[region]);
  std::span<const OwnedRange> parts = optimizer_.layout().unit_parts(unit);
  fences_->begin();
  for (int k = 0; k < static_cast<int>(parts.size()); ++k) {
    const OwnedRange& r = parts[k];
    if (r.size() == 0) continue;
    cuda::NvtxRange range("zero reduce-scatter (overlapped)");
    group(r).reduce_scatter(arena_part(Category::gradients, unit, k), staged(region, parts, r),
                            parallel::ReduceOp::avg);
    ++reduce_scatters_;
  }
  fences_->end(region);
  scattered_[region] = unit;
}

void ShardedParams::land(int region) {
  const int unit = scattered_[region];
  if (unit < 0) return;
  scattered_[region] = -1;
  std::span<const OwnedRange> parts = optimizer_.layout().unit_parts(unit);
  for (const OwnedRange& r : parts)
    if (r.size() > 0) add_to_shard(r, staged(region, parts, r));
}

void ShardedParams::drain() {
  if (regions_ != 2) return;
  fences_->join();
  land(0);
  land(1);
}

void ShardedParams::gather_whole_step() {
  drain();
  forget_gathered();  // the shards were updated (or loaded)
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
    if (!units[u].shared) {
      all_gather(u);
      model_.refresh_compute_weights(ctx_, units[u]);
    }
}

void ShardedParams::reduce_whole_step() {
  drain();
  forget_gathered();  // the optimizer updates the shards next
  const auto& units = model_.buffers().param_units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    if (!units[u].grads_shared) reduce_scatter(u);
}

void ShardedParams::zero_grads() {
  drain();
  forget_gathered();
  if (optimizer_.layout().state_elems > 0) fill(ctx_, optimizer_.grad_shards(), 0.0f);
}

}  // namespace trainer::engine
