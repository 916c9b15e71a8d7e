// Buffers: every tensor the model holds, declared before anything is
// allocated. Layers declare parameters (as ParamSpecs: name, global shape,
// init, sharding) and activation/scratch buffers; the memory plan sums them
// per category, allocates one arena per category, and binds the views. What
// `trainer plan` prints is computed from this same list.
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/context.h"
#include "kernels/fp8_scaling.h"
#include "kernels/tensor.h"

namespace trainer::model {

// compute_weights: the compute-dtype (bf16/fp16) copies of the matrices the
// GEMMs read under mixed precision, refreshed from the fp32 parameters after
// every optimizer step; empty in fp32.
// recomputed: full activation recomputation's one block's worth of
// activations, shared by every block (see Buffers::begin_recomputed_block).
enum class Category : int { parameters, gradients, activations, scratch, compute_weights, recomputed };
constexpr int kNumCategories = 6;
const char* category_name(Category c);
// The largest buffer or arena a plan may hold (64 PiB): above it a spec's
// sizes are refused (InputError) before any sum of them can wrap.
constexpr size_t kMaxPlanBytes = size_t(1) << 56;

enum class Init { normal, zeros, ones };

// A parameter's declaration. Global shape is what a single-rank model holds;
// tp_dim says which dim tensor parallelism splits (-1 = replicated).
struct ParamSpec {
  std::string name;                   // Hugging Face-style global name
  std::vector<int64_t> global_shape;  // 1 or 2 dims
  Init init = Init::normal;
  float std = 0.02f;
  int64_t valid_rows = -1;            // rows >= this are padding, initialised to 0 (padded vocab)
  int tp_dim = -1;
  int tp_replicas = 1;                // consecutive tp ranks holding the same tp_dim shard
                                      // (KV heads when n_kv_head < tp): shard tp_rank /
                                      // tp_replicas; their gradients are summed over them
  bool weight_decay = true;           // false for norms, biases, position embeddings
  bool sp_partial = false;            // replicated, but each rank's gradient covers only its
                                      // token block (norms under sequence parallelism) or
                                      // its heads (q/k norms under tp): summed over tp
  bool expert = false;
  int pp_stage = 0;
  bool tied_copy = false;             // the last pipeline stage's copy of the tied token table:
                                      // same name and values as the first stage's, not saved
  bool compute_copy = false;          // a vector a GEMM reads (a linear's bias): it gets the
                                      // compute-dtype copy every matrix gets
};

struct BufferInfo {
  std::string name;
  Category category;
  std::vector<int64_t> shape;  // local shape on this rank
  DType dtype = DType::f32;
  size_t offset = 0;  // bytes into the category's arena
  size_t bytes = 0;
};

using BufferId = int;

struct ParamId {
  int index = -1;  // into Buffers::params()
};

class Buffers {
 public:
  // Registers a parameter and its gradient (same layout in both arenas).
  ParamId add_param(ParamSpec spec, std::vector<int64_t> local_shape);
  BufferId add(Category category, std::string name, std::vector<int64_t> shape,
               DType dtype = DType::f32);

  // A scratch buffer shared by every layer that asks for `key`: temporaries
  // one layer's forward or backward fills and spends before it returns (the
  // MoE layers' backward rows), held once rather than once per layer, as
  // the dense blocks' Scratch is. Each later call must ask for the same shape
  // and dtype.
  BufferId add_shared_scratch(const std::string& key, std::vector<int64_t> shape,
                              DType dtype = DType::f32);

  size_t category_bytes(Category c) const { return bytes_[static_cast<int>(c)]; }

  // The temporaries an op takes from the backend's own scratch (CudaState's on
  // the GPU, sized by kernels/op_scratch.h), declared by each layer for the ops
  // it calls at the shapes it calls them. Ops run one after another on one
  // stream, so the memory plan holds the largest, not the sum.
  void declare_op_scratch(size_t bytes) { op_scratch_ = std::max(op_scratch_, bytes); }
  size_t op_scratch_bytes() const { return op_scratch_; }

  // Full activation recomputation (parallel.recompute: full): between these
  // calls, what is declared as an activation goes to Category::recomputed,
  // and each begin starts again at its offset 0, so every block's internal
  // activations share one region the size of the largest block's. A block
  // recomputes its forward just before its backward; only what crosses
  // blocks (the residual stream) stays in the activations arena.
  void begin_recomputed_block();
  void end_recomputed_block() { recomputing_ = false; }

  // Parameter units: the embedding, each block, the head (the Model declares
  // them). Every parameter declared between begin_param_unit and
  // end_param_unit belongs to the unit, which is contiguous in the parameter
  // and gradient arenas, laid out alike in both (from `first` and
  // `grad_first`: they differ only where blocks share gradients alone). ZeRO-3 all-gathers a unit's
  // shards before using it and reduce-scatters its gradients after.
  struct ParamUnit {
    // A run of the unit's parameters sharded over one group: the whole unit,
    // or with experts set apart (share_block_parameters) each maximal run of
    // routed experts or of the others, padded on its own to the alignment.
    struct Part {
      int param_begin = 0, param_end = 0;  // into params()
      int64_t first = 0, padded = 0;       // arena elements, as for the unit
      bool expert = false;                 // routed experts (set apart only)
    };
    int param_begin = 0, param_end = 0;  // into params()
    int64_t first = 0;    // its first element in the parameter arena
    int64_t grad_first = 0;  // in the gradient arena: `first`, unless only gradients share
    int64_t padded = 0;   // its elements, padded to a multiple of the unit alignment
    bool shared = false;  // a block under ZeRO-3: at the region every block shares
    bool grads_shared = false;  // its gradients there (ZeRO-3, and ZeRO-2 over dp > 1)
    int region = 0;  // which of the shared regions (0 or 1: blocks alternate with two)
    std::vector<Part> parts;  // in arena order, tiling [first, first + padded)
  };
  // ZeRO (call before declaring anything): each unit part is padded to a
  // multiple of `align` elements, so the shards of one all-gather land in
  // place. experts_apart (experts split over ep): routed experts are sharded
  // over other ranks (edp) than the rest of their block (dp), so they form
  // parts of their own, each gathered in its own collective.
  void pad_param_parts(int64_t align, bool experts_apart = false);
  bool parts_padded() const { return unit_align_ > 0; }
  // ZeRO-3: pad_param_parts, and a block's parameters, gradients and compute
  // copies go to one region shared by every block, the size of the largest
  // (as begin_recomputed_block does for activations): only the block being
  // run holds its whole parameters.
  // regions 2: blocks alternate between two such regions (even blocks of a
  // run in the first, odd ones in the second, each the size of its largest),
  // so one block's gathers or reduce-scatters can run on the communication
  // stream while the next block computes (ShardedParams' overlap).
  void share_block_parameters(int64_t align, bool experts_apart = false, int regions = 1);
  bool blocks_shared() const { return share_blocks_; }
  // ZeRO-2: pad_param_parts, and the blocks' gradients (only) go to one region
  // shared by every block; parameters and compute copies stay whole. Each
  // block's gradients are reduce-scattered out of it right after its backward.
  void share_block_gradients(int64_t align, bool experts_apart = false, int regions = 1);
  bool block_grads_shared() const { return share_blocks_ || share_grads_; }
  int shared_regions() const { return regions_; }
  // Ends the declaration of parameter units: with two regions, the second
  // region's offsets are known only once the run of blocks is complete (a
  // unit that is not a block ends it too). The Model calls it last.
  void end_param_units() { close_run(); }
  void begin_param_unit(bool block);
  void end_param_unit();
  const std::vector<ParamUnit>& param_units() const { return units_; }
  size_t total_bytes() const;

  // Points every buffer of `category` into `base` (an arena of category_bytes).
  void bind(Category category, void* base, Device device);

  Tensor get(BufferId id) const;
  Tensor param(ParamId id) const;
  Tensor grad(ParamId id) const;
  // What a GEMM reads: the compute-dtype copy of a matrix when there is one,
  // else the fp32 parameter itself.
  Tensor weight(ParamId id) const;

  // Mixed precision: the dtype activations are stored in and matrices get a
  // compute copy in (f32 = none). Set before declaring anything.
  void set_compute_dtype(DType dtype) { compute_dtype_ = dtype; }
  DType act_dtype() const { return compute_dtype_; }

  // FP8 GEMMs (precision.compute: fp8). The model turns fp8 on per layer
  // while declaring; a linear layer declared while it is on registers its
  // three operands (input E4M3, weight E4M3, output gradient E5M2) here,
  // under `name` + ".input" / ".weight" / ".grad_output", and quantises
  // through the shared workspace. The scaling state is mutable through a
  // const Buffers, as the arenas' contents are.
  struct Fp8Workspace {
    BufferId q = -1;      // one operand's fp8 codes (bytes)
    BufferId x = -1, w = -1, g = -1;  // the dequantised input, weight and gradient (f32)
    // fp8_pad_rows with routed experts: an operand's rows padded with zeros
    // to a multiple of 16 (input, output or output gradient, input gradient),
    // in the activation dtype.
    BufferId pad_in = -1, pad_out = -1, pad_dinp = -1;
    // ModelConfig::fp8_cache_weights: add_fp8_gemm declares each weight's cache.
    bool cache_weights = false;
  };
  void enable_fp8(int history_len, int margin, Fp8Workspace workspace);
  void set_fp8_active(bool on) { fp8_active_ = on && fp8_ != nullptr; }
  bool fp8_active() const { return fp8_active_; }
  // Index of the input; weight +1, grad +2. `expert`: a routed expert's GEMM,
  // whose operands only the ranks holding that expert see (their amaxes are
  // reduced over tp x edp, their state written by its first replica).
  // `weight_shape`: the local (out, in) of its weight, for the weight cache.
  int add_fp8_gemm(const std::string& name, bool expert, std::vector<int64_t> weight_shape);
  // The weight cache (Fp8Workspace::cache_weights) of weight operand `idx`:
  // its codes and transposed codes (two halves, as the workspace), or -1.
  // Valid from set_fp8_weight_cached until the weights or the scales change
  // (Model::refresh_compute_weights, fp8_update, fp8_state_upload: invalidate_fp8_weights).
  BufferId fp8_weight_cache(int idx) const;
  bool fp8_weight_cached(int idx) const;
  void set_fp8_weight_cached(int idx) const;
  void invalidate_fp8_weights() const { ++fp8_weight_epoch_; }
  bool fp8_expert(int idx) const { return fp8_expert_[static_cast<size_t>(idx)] != 0; }
  Fp8Scaling* fp8() const { return fp8_.get(); }
  const Fp8Workspace& fp8_workspace() const { return fp8_ws_; }
  const std::vector<std::string>& fp8_names() const { return fp8_names_; }

  // fp8 delayed scaling's working state, where the ops read the scales and
  // record the amaxes (bind_fp8_state: fp8_state_bytes() on the bound device,
  // the memory plan's "fp8 scaling" line): the amax history (row 0 this step's
  // amaxes), the scales, their inverses and each tensor's fp8_max / 2^margin,
  // with the tensors in "position" order: dense operands first, then routed
  // experts', so each reduction group's amaxes are one contiguous range
  // (fp8_amaxes) and the step's update is one op (fp8_update), with no copy
  // to the host. While bound it is the state of record: fp8_state_upload()
  // copies the host Fp8Scaling in (start, resume), fp8_state_to_host() back
  // (before a checkpoint or a test reads fp8()). Unbound (the layer tests) the
  // views are the host state's own and both copies do nothing.
  size_t fp8_state_bytes() const;
  void bind_fp8_state(void* mem, Device device);
  bool fp8_state_bound() const { return fp8_state_ != nullptr; }
  Tensor fp8_amax(int idx) const;
  Tensor fp8_scale(int idx) const;
  Tensor fp8_scale_inv(int idx) const;
  // This step's amaxes of every operand, of the dense ones or of the routed
  // experts', in position order; bound state only.
  enum class Fp8Operands { all, dense, experts };
  Tensor fp8_amaxes(Fp8Operands which) const;
  // Advances every scale (kernels/fp8_update.h) after the amaxes were reduced,
  // and drops the weight codes cast with the old scales; bound state only.
  void fp8_update(Context& ctx) const;
  void fp8_state_upload() const;
  void fp8_state_to_host() const;

  struct Param {
    ParamSpec spec;
    BufferId value;
    BufferId grad;
    BufferId compute = -1;  // compute-dtype copy of a matrix (mixed precision), or -1
  };
  const std::vector<Param>& params() const { return params_; }
  const std::vector<BufferInfo>& buffers() const { return buffers_; }
  int64_t num_param_elements() const;

 private:
  int64_t unit_cursor() const;  // the arena element the open unit's next parameter takes
  void close_part();            // pads the open unit's last part to the alignment
  void close_run();             // a run of shared blocks ends: the second region is placed
  bool shared_category(Category c) const;  // a category the shared units put in their region
  std::vector<BufferInfo> buffers_;
  std::map<std::string, BufferId> shared_scratch_;  // add_shared_scratch's, by key
  std::vector<Param> params_;
  std::array<size_t, kNumCategories> bytes_{};
  size_t op_scratch_ = 0;
  bool recomputing_ = false;
  size_t recomputed_cursor_ = 0;  // next offset in Category::recomputed
  std::vector<ParamUnit> units_;
  bool in_unit_ = false;
  int64_t unit_align_ = 0;        // > 0: ZeRO's padding of unit parts
  bool share_blocks_ = false;     // ZeRO-3: blocks in one shared region
  bool share_grads_ = false;      // ZeRO-2: the blocks' gradients in one shared region
  bool experts_apart_ = false;    // routed experts in parts of their own
  bool sharing_ = false;          // declaring a shared unit (its gradients at least)
  bool shares(Category c) const;  // declaring into the shared region of `c`
  bool region_open_ = false;      // the last unit was shared: the next one reuses its region
  // The shared region's start and next offset, per category (parameters,
  // gradients and compute copies use theirs).
  std::array<size_t, kNumCategories> region_base_{}, region_cursor_{};
  // Two regions: the open unit's, each region's extent so far, and what the
  // second region's units declared, at offsets from the run's base until
  // close_run moves them past the first region's extent.
  int regions_ = 1, region_ = 0, run_blocks_ = 0;
  std::array<std::array<size_t, kNumCategories>, 2> region_extent_{};
  std::vector<BufferId> second_region_buffers_;
  std::vector<int> second_region_units_;
  std::array<void*, kNumCategories> base_{};
  Device device_ = Device::cpu;
  DType compute_dtype_ = DType::f32;
  std::shared_ptr<Fp8Scaling> fp8_;
  bool fp8_active_ = false;
  Fp8Workspace fp8_ws_;
  std::vector<std::string> fp8_names_;  // one per Fp8Scaling tensor
  std::vector<char> fp8_expert_;        // one per Fp8Scaling tensor
  std::vector<BufferId> fp8_cache_;     // one per Fp8Scaling tensor: weights' caches, else -1
  // The cache of tensor i holds codes of epoch fp8_cached_epoch_[i]; valid
  // when that is the current epoch (mutable: filled by the ops, as the arenas).
  mutable std::vector<uint64_t> fp8_cached_epoch_;
  mutable uint64_t fp8_weight_epoch_ = 1;
  float* fp8_state_ = nullptr;
  Device fp8_state_device_ = Device::cpu;
  // Row `row` of tensor idx in the bound state: history rows 0..H-1, then
  // scale, scale_inv and scaled_max, each a row of size() floats by position.
  size_t fp8_index(int row, int idx) const;
  // Tensor idx's amax (part -1) or its row `part` after the history, as a (1)
  // tensor; unbound, the host state's own view.
  Tensor fp8_view(int part, int idx, Tensor (Fp8Scaling::*host_view)(int)) const;
  std::vector<int> fp8_pos_;  // tensor index -> position in the bound state
  int fp8_dense_ = 0;         // positions [0, fp8_dense_) are dense operands
};

}  // namespace trainer::model
