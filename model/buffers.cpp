// Offsets are assigned at declaration, aligned for vector loads and cuBLASLt.
#include "model/buffers.h"

#include <algorithm>

#include "kernels/fp8_update.h"
#include "kernels/memory.h"

namespace trainer::model {

const char* category_name(Category c) {
  switch (c) {
    case Category::parameters: return "parameters";
    case Category::gradients: return "gradients";
    case Category::activations: return "activations";
    case Category::scratch: return "scratch";
    case Category::compute_weights: return "compute copy";
    case Category::recomputed: return "recomputed";
  }
  return "?";
}

BufferId Buffers::add(Category category, std::string name, std::vector<int64_t> shape,
                      DType dtype) {
  TRAINER_CHECK(!shape.empty() && shape.size() <= Tensor::kMaxDims, "buffer {}: rank {}", name,
                shape.size());
  // A size past kMaxPlanBytes is a spec asking for more than any machine
  // holds: refused here, before sums of such sizes can wrap around 2^64.
  size_t numel = 1;
  for (int64_t s : shape)
    TRAINER_INPUT_CHECK(s >= 0 && !__builtin_mul_overflow(numel, static_cast<size_t>(s), &numel) &&
                            numel <= kMaxPlanBytes / dtype_size(dtype),
                        "memory plan: buffer {} of shape [{}] needs more than 2^56 bytes (64 PiB): "
                        "the model or batch sizes are too large", name, fmt::join(shape, ", "));
  if (recomputing_ && category == Category::activations) category = Category::recomputed;
  BufferInfo info{std::move(name), category, std::move(shape), dtype, 0, numel * dtype_size(dtype)};
  const size_t aligned = (info.bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  size_t& used = bytes_[static_cast<int>(category)];
  const bool shared = shares(category);
  if (category == Category::recomputed) {
    info.offset = recomputed_cursor_;
    recomputed_cursor_ += aligned;
    used = std::max(used, recomputed_cursor_);
  } else if (shared) {
    const int c = static_cast<int>(category);
    info.offset = region_base_[c] + region_cursor_[c];
    region_cursor_[c] += aligned;
    region_extent_[region_][c] = std::max(region_extent_[region_][c], region_cursor_[c]);
    used = std::max(used, region_base_[c] + region_cursor_[c]);
    if (region_ == 1) second_region_buffers_.push_back(static_cast<BufferId>(buffers_.size()));
  } else {
    info.offset = used;
    used += aligned;
  }
  TRAINER_INPUT_CHECK(used <= kMaxPlanBytes,
                      "memory plan: the {} arena needs more than 2^56 bytes (64 PiB) by buffer {}: "
                      "the model or batch sizes are too large", category_name(category), info.name);
  buffers_.push_back(std::move(info));
  return static_cast<BufferId>(buffers_.size() - 1);
}

BufferId Buffers::add_shared_scratch(const std::string& key, std::vector<int64_t> shape, DType dtype) {
  auto it = shared_scratch_.find(key);
  if (it == shared_scratch_.end())
    return shared_scratch_[key] = add(Category::scratch, key, std::move(shape), dtype);
  const BufferInfo& info = buffers_[it->second];
  TRAINER_CHECK(info.shape == shape && info.dtype == dtype,
                "shared scratch {}: [{}] {} asked for, declared [{}] {}", key, fmt::join(shape, ", "),
                dtype_name(dtype), fmt::join(info.shape, ", "), dtype_name(info.dtype));
  return it->second;
}

void Buffers::begin_recomputed_block() {
  recomputing_ = true;
  recomputed_cursor_ = 0;
}

void Buffers::pad_param_parts(int64_t align, bool experts_apart) {
  TRAINER_CHECK(align > 0 && params_.empty(), "pad_param_parts({}) after declaring parameters",
                align);
  unit_align_ = align;
  experts_apart_ = experts_apart;
}

void Buffers::share_block_parameters(int64_t align, bool experts_apart, int regions) {
  TRAINER_CHECK(regions == 1 || regions == 2, "{} shared block regions", regions);
  pad_param_parts(align, experts_apart);
  share_blocks_ = true;
  regions_ = regions;
}

void Buffers::share_block_gradients(int64_t align, bool experts_apart, int regions) {
  TRAINER_CHECK(regions == 1 || regions == 2, "{} shared block regions", regions);
  pad_param_parts(align, experts_apart);
  share_grads_ = true;
  regions_ = regions;
}

bool Buffers::shared_category(Category c) const {
  return (share_blocks_ || share_grads_) &&
         (c == Category::gradients ||
          (share_blocks_ && (c == Category::parameters || c == Category::compute_weights)));
}

void Buffers::close_run() {
  if (!region_open_) return;
  region_open_ = false;
  if (regions_ == 1) return;
  // The second region starts where the first one's largest block ends.
  std::array<size_t, kNumCategories> shift{};
  for (int c = 0; c < kNumCategories; ++c) {
    if (!shared_category(static_cast<Category>(c))) continue;
    shift[c] = (region_extent_[0][c] + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    bytes_[c] = std::max(bytes_[c], region_base_[c] + shift[c] + region_extent_[1][c]);
  }
  for (BufferId id : second_region_buffers_)
    buffers_[id].offset += shift[static_cast<int>(buffers_[id].category)];
  const auto elems = [](size_t bytes) { return static_cast<int64_t>(bytes / sizeof(float)); };
  for (int i : second_region_units_) {
    ParamUnit& u = units_[i];
    u.first += elems(shift[static_cast<int>(Category::parameters)]);
    u.grad_first += elems(shift[static_cast<int>(Category::gradients)]);
    for (ParamUnit::Part& part : u.parts) part.first += elems(shift[static_cast<int>(Category::parameters)]);
  }
  second_region_buffers_.clear();
  second_region_units_.clear();
}

bool Buffers::shares(Category c) const { return sharing_ && shared_category(c); }

void Buffers::begin_param_unit(bool block) {
  TRAINER_CHECK(!in_unit_, "parameter unit begun inside another");
  in_unit_ = true;
  sharing_ = block && (share_blocks_ || share_grads_);
  if (!sharing_) close_run();  // what follows this unit must not overlap it
  if (sharing_ && !region_open_) {
    // A run of blocks: its region starts where the arenas end now.
    region_base_ = bytes_;
    region_open_ = true;
    run_blocks_ = 0;
    for (auto& e : region_extent_) e.fill(0);
  }
  region_ = sharing_ ? run_blocks_++ % regions_ : 0;
  region_cursor_.fill(0);
  ParamUnit u;
  u.param_begin = static_cast<int>(params_.size());
  u.first = unit_cursor();
  const int gc = static_cast<int>(Category::gradients);
  u.grad_first = static_cast<int64_t>((sharing_ ? region_base_[gc] : bytes_[gc]) / sizeof(float));
  u.shared = sharing_ && share_blocks_;
  u.grads_shared = sharing_;
  u.region = region_;
  if (region_ == 1) second_region_units_.push_back(static_cast<int>(units_.size()));
  u.parts.push_back({u.param_begin, u.param_begin, u.first, 0, false});
  units_.push_back(u);
}

int64_t Buffers::unit_cursor() const {
  const int pc = static_cast<int>(Category::parameters);
  const size_t end = shares(Category::parameters) ? region_base_[pc] + region_cursor_[pc] : bytes_[pc];
  return static_cast<int64_t>(end / sizeof(float));
}

void Buffers::close_part() {
  ParamUnit::Part& part = units_.back().parts.back();
  part.param_end = static_cast<int>(params_.size());
  const int64_t align = std::max<int64_t>(unit_align_, 1);
  part.padded = (unit_cursor() - part.first + align - 1) / align * align;
  // Both arenas reach the padded end (the padding stays zero); the unit's
  // next part, if any, starts there.
  const ParamUnit& u = units_.back();
  const int64_t end_elem = part.first + part.padded;
  for (Category c : {Category::parameters, Category::gradients}) {
    const int i = static_cast<int>(c);
    const int64_t at = c == Category::parameters ? end_elem : u.grad_first + (end_elem - u.first);
    const size_t end = static_cast<size_t>(at) * sizeof(float);
    if (shares(c)) {
      region_cursor_[i] = end - region_base_[i];
      region_extent_[region_][i] = std::max(region_extent_[region_][i], region_cursor_[i]);
    }
    bytes_[i] = std::max(bytes_[i], end);
  }
}

void Buffers::end_param_unit() {
  TRAINER_CHECK(in_unit_, "parameter unit ended without one begun");
  close_part();
  ParamUnit& u = units_.back();
  u.param_end = static_cast<int>(params_.size());
  u.padded = u.parts.back().first + u.parts.back().padded - u.first;
  in_unit_ = sharing_ = false;
}

ParamId Buffers::add_param(ParamSpec spec, std::vector<int64_t> local_shape) {
  if (in_unit_ && experts_apart_) {
    ParamUnit::Part& part = units_.back().parts.back();
    if (static_cast<int>(params_.size()) == part.param_begin) {
      part.expert = spec.expert;
    } else if (part.expert != spec.expert) {
      close_part();
      const int begin = static_cast<int>(params_.size());
      units_.back().parts.push_back({begin, begin, unit_cursor(), 0, spec.expert});
    }
  }
  BufferId value = add(Category::parameters, spec.name, local_shape);
  BufferId grad = add(Category::gradients, spec.name, local_shape);
  const int64_t shift = in_unit_ ? units_.back().grad_first - units_.back().first : 0;
  TRAINER_CHECK(static_cast<int64_t>(buffers_[grad].offset) ==
                    static_cast<int64_t>(buffers_[value].offset) + shift * int64_t(sizeof(float)),
                "{}: parameter and gradient arenas out of step", spec.name);
  // The matrices the GEMMs and lookups read get a compute-dtype copy, and so do
  // the linears' biases: cuBLASLt's bias epilogue reads a bias in the output's
  // dtype (Megatron's and llm.c's bf16 models hold them so too). Norm weights
  // and biases are read in fp32 by the norm ops.
  BufferId compute = -1;
  if (compute_dtype_ != DType::f32 && (local_shape.size() == 2 || spec.compute_copy))
    compute = add(Category::compute_weights, spec.name, local_shape, compute_dtype_);
  params_.push_back({std::move(spec), value, grad, compute});
  return ParamId{static_cast<int>(params_.size() - 1)};
}

void Buffers::enable_fp8(int history_len, int margin, Fp8Workspace workspace) {
  fp8_ = std::make_shared<Fp8Scaling>(history_len, margin);
  fp8_ws_ = workspace;
}

int Buffers::add_fp8_gemm(const std::string& name, bool expert, std::vector<int64_t> weight_shape) {
  TRAINER_CHECK(fp8_active_, "{}: fp8 GEMM declared while fp8 is off", name);
  TRAINER_CHECK(weight_shape.size() == 2, "{}: fp8 GEMM weight of rank {}", name, weight_shape.size());
  int first = fp8_->add(DType::e4m3);
  fp8_->add(DType::e4m3);
  fp8_->add(DType::e5m2);
  for (const char* op : {".input", ".weight", ".grad_output"}) {
    fp8_names_.push_back(name + op);
    fp8_expert_.push_back(expert ? 1 : 0);
    fp8_cache_.push_back(-1);
    fp8_cached_epoch_.push_back(0);
  }
  if (fp8_ws_.cache_weights) {
    TRAINER_CHECK(!share_blocks_, "{}: fp8 weight cache with shared blocks", name);
    // Two halves, each starting aligned: the codes (out, in) and their transpose.
    const size_t n = static_cast<size_t>(weight_shape[0] * weight_shape[1]);
    const size_t half = (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    fp8_cache_[first + 1] = add(Category::compute_weights, name + ".weight_fp8",
                                {static_cast<int64_t>(2 * half)}, fp8_->format(first + 1));
  }
  return first;
}

BufferId Buffers::fp8_weight_cache(int idx) const { return fp8_cache_.at(static_cast<size_t>(idx)); }

bool Buffers::fp8_weight_cached(int idx) const {
  return fp8_cached_epoch_.at(static_cast<size_t>(idx)) == fp8_weight_epoch_;
}

void Buffers::set_fp8_weight_cached(int idx) const {
  TRAINER_CHECK(fp8_weight_cache(idx) >= 0, "fp8 tensor {} has no weight cache", idx);
  fp8_cached_epoch_[static_cast<size_t>(idx)] = fp8_weight_epoch_;
}

size_t Buffers::fp8_state_bytes() const {
  if (!fp8_ || fp8_->size() == 0) return 0;
  return (size_t(fp8_->history_len()) + 3) * size_t(fp8_->size()) * sizeof(float);
}

void Buffers::bind_fp8_state(void* mem, Device device) {
  TRAINER_CHECK(fp8_ != nullptr && fp8_->size() > 0, "fp8 state bound while no fp8 GEMM is declared");
  fp8_state_ = static_cast<float*>(mem);
  fp8_state_device_ = device;
  const int n = fp8_->size();
  fp8_pos_.assign(n, 0);
  int next = 0;
  for (int routed : {0, 1}) {
    if (routed) fp8_dense_ = next;
    for (int i = 0; i < n; ++i)
      if (fp8_expert_[i] == routed) fp8_pos_[i] = next++;
  }
}

namespace {
// The bound state's rows after the H rows of amax history: scale, scale_inv and
// scaled_max, each `n` floats in position order.
// kAmax: history row 0, this step's amaxes.
enum Fp8Part { kAmax = -1, kScale = 0, kScaleInv = 1, kScaledMax = 2 };
}  // namespace

size_t Buffers::fp8_index(int row, int idx) const {
  return size_t(row) * size_t(fp8_->size()) + size_t(fp8_pos_.at(size_t(idx)));
}

Tensor Buffers::fp8_view(int part, int idx, Tensor (Fp8Scaling::*host_view)(int)) const {
  TRAINER_CHECK(fp8_ != nullptr, "fp8 state used while fp8 is off");
  if (!fp8_state_) return ((*fp8_).*host_view)(idx);
  const int row = part == kAmax ? 0 : fp8_->history_len() + part;
  return Tensor(fp8_state_ + fp8_index(row, idx), {1}, DType::f32, fp8_state_device_);
}
Tensor Buffers::fp8_amax(int idx) const { return fp8_view(kAmax, idx, &Fp8Scaling::amax_view); }
Tensor Buffers::fp8_scale(int idx) const { return fp8_view(kScale, idx, &Fp8Scaling::scale_view); }
Tensor Buffers::fp8_scale_inv(int idx) const {
  return fp8_view(kScaleInv, idx, &Fp8Scaling::scale_inv_view);
}

Tensor Buffers::fp8_amaxes(Fp8Operands which) const {
  TRAINER_CHECK(fp8_state_ != nullptr, "fp8 amaxes read before the fp8 state was bound");
  const int begin = which == Fp8Operands::experts ? fp8_dense_ : 0;
  const int end = which == Fp8Operands::dense ? fp8_dense_ : fp8_->size();
  return Tensor(fp8_state_ + begin, {end - begin}, DType::f32, fp8_state_device_);
}

void Buffers::fp8_update(Context& ctx) const {
  TRAINER_CHECK(fp8_state_ != nullptr, "fp8 scales updated before the fp8 state was bound");
  TRAINER_CHECK(ctx.device == fp8_state_device_, "fp8 state on {}, updated on {}",
                device_name(fp8_state_device_), device_name(ctx.device));
  const int64_t n = fp8_->size(), H = fp8_->history_len();
  auto part = [&](int p) {
    return Tensor(fp8_state_ + size_t(H + p) * size_t(n), {n}, DType::f32, fp8_state_device_);
  };
  fp8_scaling_update(ctx, Tensor(fp8_state_, {H, n}, DType::f32, fp8_state_device_), part(kScale),
                     part(kScaleInv), part(kScaledMax));
  invalidate_fp8_weights();  // the scales the cached codes were cast with may have changed
}

void Buffers::fp8_state_upload() const {
  invalidate_fp8_weights();
  if (!fp8_state_) return;
  // One copy (one device wait) of the whole state, permuted into position order.
  const int n = fp8_->size(), H = fp8_->history_len();
  std::vector<float> all((size_t(H) + 3) * n);
  const float* h = fp8_->history_data();
  for (int i = 0; i < n; ++i) {
    for (int r = 0; r < H; ++r) all[fp8_index(r, i)] = h[size_t(r) * n + i];
    all[fp8_index(H + kScale, i)] = fp8_->scale(i);
    all[fp8_index(H + kScaleInv, i)] = fp8_->scale_inv(i);
    all[fp8_index(H + kScaledMax, i)] = fp8_->scaled_max(i);
  }
  copy_from_host(Tensor(fp8_state_, {int64_t(all.size())}, DType::f32, fp8_state_device_), all.data());
}

void Buffers::fp8_state_to_host() const {
  if (!fp8_state_) return;
  const int n = fp8_->size(), H = fp8_->history_len();
  std::vector<float> all((size_t(H) + 3) * n);
  copy_to_host(all.data(), Tensor(fp8_state_, {int64_t(all.size())}, DType::f32, fp8_state_device_));
  float* h = fp8_->history_data();
  for (int i = 0; i < n; ++i) {
    for (int r = 0; r < H; ++r) h[size_t(r) * n + i] = all[fp8_index(r, i)];
    fp8_->scale_data()[i] = all[fp8_index(H + kScale, i)];
    fp8_->scale_inv_data()[i] = all[fp8_index(H + kScaleInv, i)];
  }
}

size_t Buffers::total_bytes() const {
  size_t t = 0;
  for (size_t b : bytes_) t += b;
  return t;
}

void Buffers::bind(Category category, void* base, Device device) {
  TRAINER_CHECK(!region_open_ || regions_ == 1,
                "buffers bound before the run of shared blocks was closed (end_param_units)");
  base_[static_cast<int>(category)] = base;
  device_ = device;
}

Tensor Buffers::get(BufferId id) const {
  TRAINER_CHECK(id >= 0 && id < static_cast<int>(buffers_.size()), "bad buffer id {}", id);
  const BufferInfo& b = buffers_[id];
  void* base = base_[static_cast<int>(b.category)];
  TRAINER_CHECK(base != nullptr || b.bytes == 0, "buffer {} used before its {} arena was bound",
                b.name, category_name(b.category));
  Tensor t;
  t.data = static_cast<char*>(base) + b.offset;
  t.ndim = static_cast<int>(b.shape.size());
  t.dtype = b.dtype;
  t.device = device_;
  int64_t st = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = b.shape[d];
    t.stride[d] = st;
    st *= b.shape[d];
  }
  return t;
}

Tensor Buffers::param(ParamId id) const { return get(params_.at(id.index).value); }
Tensor Buffers::grad(ParamId id) const { return get(params_.at(id.index).grad); }
Tensor Buffers::weight(ParamId id) const {
  const Param& p = params_.at(id.index);
  return get(p.compute >= 0 ? p.compute : p.value);
}

int64_t Buffers::num_param_elements() const {
  int64_t n = 0;
  for (const auto& p : params_) {
    int64_t numel = 1;
    for (int64_t s : buffers_[p.value].shape) numel *= s;
    n += numel;
  }
  return n;
}

}  // namespace trainer::model
