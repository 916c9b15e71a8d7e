// AdamW step: one fused kernel call per parameter tensor.
#include "engine/optimizer.h"

#include "kernels/adamw.h"

namespace trainer::engine {

using model::Category;

AdamW::AdamW(const OptimizerSpec& spec, const model::Buffers& buffers)
    : spec_(spec), buf_(buffers) {}

size_t AdamW::state_bytes() const { return 2 * buf_.category_bytes(Category::parameters); }

void AdamW::bind(void* base, Device device) {
  int64_t n = static_cast<int64_t>(buf_.category_bytes(Category::parameters) / sizeof(float));
  m_ = Tensor(base, {n}, DType::f32, device);
  v_ = Tensor(static_cast<float*>(base) + n, {n}, DType::f32, device);
}

void AdamW::step(Context& ctx, int64_t step, float lr, float grad_scale) {
  for (const auto& p : buf_.params()) {
    const model::BufferInfo& info = buf_.buffers()[p.value];
    Tensor param = buf_.get(p.value), grad = buf_.get(p.grad);
    int64_t begin = static_cast<int64_t>(info.offset / sizeof(float));
    Tensor m = m_.slice(begin, begin + param.numel());
    Tensor v = v_.slice(begin, begin + param.numel());
    AdamWArgs args;
    args.lr = lr;
    args.beta1 = static_cast<float>(spec_.beta1);
    args.beta2 = static_cast<float>(spec_.beta2);
    args.eps = static_cast<float>(spec_.eps);
    args.weight_decay = p.spec.weight_decay ? static_cast<float>(spec_.weight_decay) : 0.0f;
    args.step = step;
    args.grad_scale = grad_scale;
    adamw_update(ctx, param.view({param.numel()}), grad.view({grad.numel()}), m, v, args);
  }
}

}  // namespace trainer::engine
