// Buffers: every tensor the model holds, declared before anything is
// allocated. Layers declare parameters (as ParamSpecs: name, global shape,
// init, sharding) and activation/scratch buffers; the memory plan sums them
// per category, allocates one arena per category, and binds the views. What
// `trainer plan` prints is computed from this same list.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace trainer::model {

enum class Category : int { parameters, gradients, activations, scratch };
constexpr int kNumCategories = 4;
const char* category_name(Category c);

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
                                      // token block (norms under sequence parallelism)
  bool expert = false;
  int pp_stage = 0;
  bool tied_copy = false;             // the last pipeline stage's copy of the tied token table:
                                      // same name and values as the first stage's, not saved
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

  size_t category_bytes(Category c) const { return bytes_[static_cast<int>(c)]; }
  size_t total_bytes() const;

  // Points every buffer of `category` into `base` (an arena of category_bytes).
  void bind(Category category, void* base, Device device);

  Tensor get(BufferId id) const;
  Tensor param(ParamId id) const;
  Tensor grad(ParamId id) const;

  struct Param {
    ParamSpec spec;
    BufferId value;
    BufferId grad;
  };
  const std::vector<Param>& params() const { return params_; }
  const std::vector<BufferInfo>& buffers() const { return buffers_; }
  int64_t num_param_elements() const;

 private:
  std::vector<BufferInfo> buffers_;
  std::vector<Param> params_;
  std::array<size_t, kNumCategories> bytes_{};
  std::array<void*, kNumCategories> base_{};
  Device device_ = Device::cpu;
};

}  // namespace trainer::model
