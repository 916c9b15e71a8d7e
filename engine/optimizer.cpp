// AdamW step: one fused kernel call per parameter (or part of one) in range.
#include "engine/optimizer.h"

#include <algorithm>

#include "kernels/adamw.h"

namespace trainer::engine {

AdamW::AdamW(const OptimizerSpec& spec, const model::Buffers& buffers, int64_t begin, int64_t end)
    : AdamW(spec, buffers, arena_range_layout(buffers, begin, end)) {}

AdamW::AdamW(const OptimizerSpec& spec, const model::Buffers& buffers, ZeroLayout layout)
    : spec_(spec), buf_(buffers), layout_(std::move(layout)) {
  TRAINER_CHECK(!layout_.owned.empty(), "AdamW over no parameters");
}

size_t AdamW::state_bytes() const { return 2 * static_cast<size_t>(layout_.state_elems) * sizeof(float); }

size_t AdamW::param_shard_bytes() const {
  return layout_.shards_parameters() ? static_cast<size_t>(layout_.state_elems) * sizeof(float) : 0;
}

size_t AdamW::grad_shard_bytes() const {
  return layout_.shards_gradients() ? static_cast<size_t>(layout_.state_elems) * sizeof(float) : 0;
}

void AdamW::bind(void* base, Device device) {
  int64_t n = layout_.state_elems;
  m_ = Tensor(base, {n}, DType::f32, device);
  v_ = Tensor(static_cast<float*>(base) + n, {n}, DType::f32, device);
}

void AdamW::bind_shards(void* params, void* grads, Device device) {
  const int64_t n = layout_.state_elems;
  params_ = Tensor(params, {layout_.shards_parameters() ? n : 0}, DType::f32, device);
  grads_ = Tensor(grads, {layout_.shards_gradients() ? n : 0}, DType::f32, device);
}

void AdamW::step(Context& ctx, int64_t step, float lr, float grad_scale) {
  AdamWArgs args;
  args.lr = lr;
  args.beta1 = static_cast<float>(spec_.beta1);
  args.beta2 = static_cast<float>(spec_.beta2);
  args.eps = static_cast<float>(spec_.eps);
  args.step = step;
  args.grad_scale = grad_scale;
  const bool param_shards = layout_.shards_parameters(), grad_shards = layout_.shards_gradients();
  for (int i = 0; i < static_cast<int>(buf_.params().size()); ++i) {
    const model::Buffers::Param& p = buf_.params()[i];
    const OwnedPart o = owned(i);
    if (o.empty()) continue;
    args.weight_decay = p.spec.weight_decay ? static_cast<float>(spec_.weight_decay) : 0.0f;
    const int64_t s = o.state_at, e = o.state_at + o.size();
    Tensor param = buf_.get(p.value), grad = buf_.get(p.grad);
    Tensor pf = param_shards ? params_.slice(s, e) : param.view({param.numel()}).slice(o.lo, o.hi);
    Tensor gf = grad_shards ? grads_.slice(s, e) : grad.view({grad.numel()}).slice(o.lo, o.hi);
    adamw_update(ctx, pf, gf, m_.slice(s, e), v_.slice(s, e), args);
  }
}

}  // namespace trainer::engine
