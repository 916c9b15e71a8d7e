// Memory plan and its allocation.
#include "engine/memory_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "kernels/elementwise.h"
#include "kernels/memory.h"
#include "kernels/op_scratch.h"

#ifdef TRAINER_CUDA
#include "kernels/cuda/cuda_state.h"
#endif

namespace trainer::engine {

using model::Category;

size_t MemoryPlan::total() const {
  size_t t = optimizer + param_shards + grad_shards + shard_staging + fp8_state + op_scratch +
             gemm_workspace;
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

namespace {
std::vector<std::string> describe_chunk_slots(const std::vector<std::pair<int, size_t>>& slots) {
  std::vector<std::string> out;
  for (size_t c = 0; c < slots.size(); ++c)
    out.push_back(fmt::format("chunk {}: {} x {}", c, slots[c].first,
                              format_bytes(double(slots[c].second))));
  return out;
}
}  // namespace

std::string MemoryPlan::describe() const {
  std::string s = fmt::format("  parameters   {:>12} elements\n", num_params);
  auto line = [&](const char* name, size_t b) {
    s += fmt::format("  {:<12} {:>14} bytes  {:>12}\n", name, b, format_bytes(double(b)));
  };
  for (int c = 0; c < model::kNumCategories; ++c)
    // fp32 has no compute copy, recompute none no shared block region.
    if ((c != static_cast<int>(Category::compute_weights) &&
         c != static_cast<int>(Category::recomputed)) || category[c] > 0)
      line(c == static_cast<int>(Category::activations) && activation_slots > 1
             ? "activations*"
             : model::category_name(static_cast<Category>(c)),
         category[c]);
  line("optimizer", optimizer);
  if (param_shards > 0) line("param shard", param_shards);
  if (grad_shards > 0) {
    line("grad shard", grad_shards);
    line("rs staging", shard_staging);
  }
  if (fp8_state > 0) line("fp8 scaling", fp8_state);
  if (cuda) {
    line("op scratch", op_scratch);
    line("cuBLASLt ws", gemm_workspace);
  }
  line("total", total());
  const bool two = shared_regions == 2;
  if (param_shards > 0)
    s += fmt::format(
        "  zero 3: parameters, gradients and compute copy hold the embedding, the head and {},\n"
        "  all-gathered over dp (dp x cp with cp; routed experts over edp with ep) when used;\n"
        "  only the shards persist\n", two ? "two blocks" : "one block");
  else if (grad_shards > 0)
    s += fmt::format(
        "  zero 2: gradients hold the embedding's, the head's and {}, each block's\n"
        "  reduce-scattered over dp (dp x cp with cp; routed experts over edp with ep) into the\n"
        "  grad shard right after its backward\n", two ? "two blocks'" : "one block's");
  if (two)
    s += "  two block regions (dp-only mesh): on GPUs a block's reduce-scatter (zero 3: and the\n"
         "  next block's all-gather) runs on the communication stream while the next computes\n";
  if (fp8_state > 0)
    s += "  fp8 scaling: each fp8 GEMM operand's amax history (precision.fp8_amax_history), scale\n"
         "  and inverse, updated where the GEMMs run\n";
  if (cuda)
    s += "  op scratch and cuBLASLt ws are the CUDA backend's: the largest temporary of any op\n"
         "  (reserved at start) and the GEMM workspace; not counted: the CUDA context, NCCL's and\n"
         "  cuBLASLt's own buffers\n";
  if (activation_slots > 1)
    s += chunk_slots.size() > 1
             ? fmt::format("  * micro-batches in flight per model chunk: {}\n",
                           fmt::join(describe_chunk_slots(chunk_slots), ", "))
             : fmt::format("  * {} micro-batches in flight x {} each\n", activation_slots,
                           format_bytes(double(activation_slot_bytes())));
  return s;
}

MemoryPlan plan_memory(const model::Buffers& buffers, const AdamW& optimizer,
                       int64_t arena_elems, int activation_slots,
                       std::vector<std::pair<int, size_t>> chunk_slots, Device device) {
  MemoryPlan plan;
  for (int c = 0; c < model::kNumCategories; ++c)
    plan.category[c] = buffers.category_bytes(static_cast<Category>(c));
  plan.activation_slots = std::max(activation_slots, 1);
  size_t& activations = plan.category[static_cast<int>(Category::activations)];
  // Each category is at most kMaxPlanBytes (Buffers::add): these products are
  // checked the same way, so total() cannot wrap.
  auto checked = [](size_t n, size_t bytes) {
    size_t out = 0;
    TRAINER_INPUT_CHECK(!__builtin_mul_overflow(n, bytes, &out) && out <= model::kMaxPlanBytes,
                        "memory plan: {} activation slots of {} bytes need more than 2^56 bytes "
                        "(64 PiB): the model or batch sizes are too large", n, bytes);
    return out;
  };
  activations = checked(size_t(plan.activation_slots), activations);
  if (!chunk_slots.empty()) {
    plan.activation_slots = 0;
    activations = 0;
    for (auto [n, bytes] : chunk_slots) {
      plan.activation_slots += n;
      activations = checked(1, activations + checked(size_t(n), bytes));
    }
    plan.activation_slots = std::max(plan.activation_slots, 1);
    plan.chunk_slots = std::move(chunk_slots);
  }
  for (Category c : {Category::parameters, Category::gradients})
    plan.category[static_cast<int>(c)] = std::max(
        plan.category[static_cast<int>(c)], static_cast<size_t>(arena_elems) * sizeof(float));
  plan.optimizer = optimizer.state_bytes();
  plan.param_shards = optimizer.param_shard_bytes();
  plan.grad_shards = optimizer.grad_shard_bytes();
  if (optimizer.layout().shards_gradients()) {
    plan.shared_regions = optimizer.layout().regions;
    plan.shard_staging = static_cast<size_t>(optimizer.layout().staging_elems()) * sizeof(float);
  }
  plan.num_params = buffers.num_param_elements();
  plan.fp8_state = buffers.fp8_state_bytes();
  if (device == Device::cuda) {
    plan.cuda = true;
    // The layers' ops, and the trainer's own: the gradient norm's sums of
    // squares (over at most all this rank's elements) and the overflow checks;
    // the range check of document starts and positions.
    size_t bytes = std::max({buffers.op_scratch_bytes(), amax_scratch_bytes(),
                             index_check_scratch_bytes(),
                             sum_of_squares_scratch_bytes(std::max<int64_t>(
                                 plan.num_params, arena_elems))});
    plan.op_scratch = scratch_padded(bytes);  // what reserve_scratch allocates
    plan.gemm_workspace = kCublasLtWorkspaceBytes;
  }
  return plan;
}

Arenas::Arenas(const MemoryPlan& plan, model::Buffers& buffers, AdamW& optimizer, Context& ctx)
    : device_(ctx.device), slot_bytes_(plan.activation_slot_bytes()), plan_(plan) {
  for (int c = 0; c < model::kNumCategories; ++c) {
    blocks_[c] = take(plan.category[c], ctx);
    buffers.bind(static_cast<Category>(c), blocks_[c], device_);
  }
  const int k = model::kNumCategories;
  blocks_[k] = take(plan.optimizer, ctx);
  optimizer.bind(blocks_[k], device_);
  blocks_[k + 1] = take(plan.param_shards, ctx);
  blocks_[k + 2] = take(plan.grad_shards, ctx);
  blocks_[k + 3] = take(plan.shard_staging, ctx);
  optimizer.bind_shards(blocks_[k + 1], blocks_[k + 2], device_);
  blocks_[k + 4] = take(plan.fp8_state, ctx);
  if (plan.fp8_state > 0) buffers.bind_fp8_state(blocks_[k + 4], device_);
#ifdef TRAINER_CUDA
  if (device_ == Device::cuda && plan.cuda) {
    // The workspace came with the CudaState; the scratch is reserved now, so
    // step 1 neither grows it nor synchronizes, and a request the plan missed throws.
    cuda::reserve_scratch(*ctx.cuda, plan.op_scratch);
    allocated_ += plan.op_scratch + plan.gemm_workspace;
  }
#endif
}

Tensor Arenas::shard_staging() const {
  return Tensor(blocks_[model::kNumCategories + 3],
                {static_cast<int64_t>(plan_.shard_staging / sizeof(float))}, DType::f32, device_);
}

void* Arenas::activation_slot(int k) const {
  return static_cast<char*>(blocks_[static_cast<int>(Category::activations)]) + k * slot_bytes_;
}

size_t MemoryPlan::activation_slot_offset(int chunk, int k) const {
  if (chunk_slots.empty()) return size_t(k) * activation_slot_bytes();
  TRAINER_CHECK(chunk >= 0 && chunk < static_cast<int>(chunk_slots.size()) &&
                    k < chunk_slots[chunk].first,
                "activation slot {} of model chunk {}: not in the plan", k, chunk);
  size_t offset = 0;
  for (int c = 0; c < chunk; ++c) offset += size_t(chunk_slots[c].first) * chunk_slots[c].second;
  return offset + size_t(k) * chunk_slots[chunk].second;
}

void* Arenas::activation_slot(int chunk, int k) const {
  return static_cast<char*>(blocks_[static_cast<int>(Category::activations)]) +
         plan_.activation_slot_offset(chunk, k);
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
