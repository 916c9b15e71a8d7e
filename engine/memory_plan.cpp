// Memory plan and its allocation.
#include "engine/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/elementwise.h"
#include "kernels/memory.h"

namespace trainer::engine {

using model::Category;

size_t MemoryPlan::total() const {
  size_t t = optimizer;
  for (size_t b : category) t += b;
  return t;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

std::string MemoryPlan::describe() const {
  std::string s = fmt::format("  parameters   {:>12} elements\n", num_params);
  auto line = [&](const char* name, size_t b) {
    s += fmt::format("  {:<12} {:>14} bytes  {:>12}\n", name, b, format_bytes(double(b)));
  };
  for (int c = 0; c < model::kNumCategories; ++c)
    line(c == static_cast<int>(Category::activations) && activation_slots > 1
             ? "activations*"
             : model::category_name(static_cast<Category>(c)),
         category[c]);
  line("optimizer", optimizer);
  line("total", total());
  if (activation_slots > 1)
    s += fmt::format("  * {} micro-batches in flight x {} each\n", activation_slots,
                     format_bytes(double(activation_slot_bytes())));
  return s;
}

MemoryPlan plan_memory(const model::Buffers& buffers, const AdamW& optimizer,
                       int64_t arena_elems, int activation_slots) {
  MemoryPlan plan;
  for (int c = 0; c < model::kNumCategories; ++c)
    plan.category[c] = buffers.category_bytes(static_cast<Category>(c));
  plan.activation_slots = std::max(activation_slots, 1);
  plan.category[static_cast<int>(Category::activations)] *= plan.activation_slots;
  for (Category c : {Category::parameters, Category::gradients})
    plan.category[static_cast<int>(c)] = std::max(
        plan.category[static_cast<int>(c)], static_cast<size_t>(arena_elems) * sizeof(float));
  plan.optimizer = optimizer.state_bytes();
  plan.num_params = buffers.num_param_elements();
  return plan;
}

Arenas::Arenas(const MemoryPlan& plan, model::Buffers& buffers, AdamW& optimizer, Context& ctx)
    : device_(ctx.device), slot_bytes_(plan.activation_slot_bytes()) {
  for (int c = 0; c < model::kNumCategories; ++c) {
    blocks_[c] = take(plan.category[c], ctx);
    buffers.bind(static_cast<Category>(c), blocks_[c], device_);
  }
  blocks_[model::kNumCategories] = take(plan.optimizer, ctx);
  optimizer.bind(blocks_[model::kNumCategories], device_);
}

void* Arenas::activation_slot(int k) const {
  return static_cast<char*>(blocks_[static_cast<int>(Category::activations)]) + k * slot_bytes_;
}

void* Arenas::take(size_t bytes, Context& ctx) {
  void* p = device_alloc(device_, bytes);
  allocated_ += bytes;
  // Zeroed so alignment gaps stay zero: norms and optimizer walk arenas flat.
  if (bytes) fill(ctx, Tensor(p, {int64_t(bytes / sizeof(float))}, DType::f32, device_), 0.0f);
  return p;
}

Arenas::~Arenas() {
  for (void* p : blocks_) device_free(device_, p);
}

}  // namespace trainer::engine
