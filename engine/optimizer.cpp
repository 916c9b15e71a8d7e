// AdamW step: one fused kernel call per parameter (or part of one) in range.
#include "engine/optimizer.h"

#include <algorithm>

#include "kernels/adamw.h"

namespace trainer::engine {

using model::Category;

AdamW::AdamW(const OptimizerSpec& spec, const model::Buffers& buffers, int64_t begin,
             int64_t end)
    : spec_(spec), buf_(buffers), begin_(begin) {
  int64_t arena = static_cast<int64_t>(buffers.category_bytes(Category::parameters) / sizeof(float));
  end_ = end < 0 ? arena : end;
  TRAINER_CHECK(0 <= begin_ && begin_ <= end_, "AdamW range [{}, {})", begin_, end_);
}

size_t AdamW::state_bytes() const { return 2 * static_cast<size_t>(end_ - begin_) * sizeof(float); }

void AdamW::bind(void* base, Device device) {
  int64_t n = end_ - begin_;
  m_ = Tensor(base, {n}, DType::f32, device);
  v_ = Tensor(static_cast<float*>(base) + n, {n}, DType::f32, device);
}

void AdamW::step(Context& ctx, int64_t step, float lr, float grad_scale) {
  AdamWArgs args;
  args.lr = lr;
  args.beta1 = static_cast<float>(spec_.beta1);
  args.beta2 = static_cast<float>(spec_.beta2);
  args.eps = static_cast<float>(spec_.eps);
  args.step = step;
  args.grad_scale = grad_scale;
  for (const auto& p : buf_.params()) {
    const model::BufferInfo& info = buf_.buffers()[p.value];
    int64_t first = static_cast<int64_t>(info.offset / sizeof(float));
    Tensor param = buf_.get(p.value), grad = buf_.get(p.grad);
    int64_t lo = std::max(first, begin_), hi = std::min(first + param.numel(), end_);
    if (lo >= hi) continue;
    args.weight_decay = p.spec.weight_decay ? static_cast<float>(spec_.weight_decay) : 0.0f;
    Tensor pf = param.view({param.numel()}).slice(lo - first, hi - first);
    Tensor gf = grad.view({grad.numel()}).slice(lo - first, hi - first);
    adamw_update(ctx, pf, gf, m_.slice(lo - begin_, hi - begin_), v_.slice(lo - begin_, hi - begin_),
                 args);
  }
}

}  // namespace trainer::engine
