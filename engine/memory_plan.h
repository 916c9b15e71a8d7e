// MemoryPlan: the bytes of every arena one rank holds, computed from the
// declared buffers before anything is allocated. `trainer plan` prints it and
// `trainer train` allocates exactly it (Arenas), so the two cannot disagree.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "engine/optimizer.h"
#include "model/buffers.h"

namespace trainer::engine {

struct MemoryPlan {
  std::array<size_t, model::kNumCategories> category{};  // parameters, gradients, activations, scratch
  size_t optimizer = 0;                                  // AdamW m and v
  // ZeRO-3: this rank's shards of the fp32 parameters and of their gradients
  // (the arenas above then hold the embedding, the head and one block's
  // worth, gathered), and one unit shard of reduce-scatter staging.
  size_t param_shards = 0, grad_shards = 0, shard_staging = 0;
  // ZeRO-2/3: blocks alternate between two regions (zero_double_buffers), so
  // one block's collectives overlap the next block's compute.
  int shared_regions = 1;
  int64_t num_params = 0;                                // elements held by this rank
  // fp8: the delayed-scaling state the ops read and write (Buffers::fp8_state_bytes).
  size_t fp8_state = 0;
  // The CUDA backend's own device memory (planned when the job runs on cuda):
  // the largest temporary any op takes from CudaState scratch (kernels/op_scratch.h,
  // declared by the layers), reserved at start and never grown, and cuBLASLt's
  // workspace.
  bool cuda = false;
  size_t op_scratch = 0, gemm_workspace = 0;
  // Copies of the activations one micro-batch needs: a pipeline stage holds
  // that many micro-batches in flight (category[activations] counts them all).
  int activation_slots = 1;
  // Pipelines: (slots, bytes per slot) of each model chunk, the chunks' slot
  // pools back to back; empty = activation_slots copies of all activations.
  std::vector<std::pair<int, size_t>> chunk_slots;
  size_t activation_slot_bytes() const { return category[2] / activation_slots; }
  // Byte offset of slot k of `chunk` in the activations arena.
  size_t activation_slot_offset(int chunk, int k) const;
  size_t total() const;
  std::string describe() const;  // the table `trainer plan` prints
};

// arena_elems: the parameter and gradient arenas' size in fp32 elements when
// ZeRO pads them to a multiple of the dp size (0 = as declared); chunk_slots:
// a pipeline stage's slot pools (MemoryPlan::chunk_slots; then activation_slots
// is their sum and is ignored).
// device: cuda adds the backend's lines.
MemoryPlan plan_memory(const model::Buffers& buffers, const AdamW& optimizer,
                       int64_t arena_elems = 0, int activation_slots = 1,
                       std::vector<std::pair<int, size_t>> chunk_slots = {},
                       Device device = Device::cpu);

// One allocation per arena of the plan, zeroed, bound to the buffers and the optimizer.
class Arenas {
 public:
  Arenas(const MemoryPlan& plan, model::Buffers& buffers, AdamW& optimizer, Context& ctx);
  ~Arenas();
  Arenas(const Arenas&) = delete;
  Arenas& operator=(const Arenas&) = delete;

  size_t allocated_bytes() const { return allocated_; }
  // Activation slot k of plan.activation_slots (slot 0 is bound at construction).
  void* activation_slot(int k) const;
  // Slot k of model chunk `chunk`'s pool (MemoryPlan::chunk_slots).
  void* activation_slot(int chunk, int k) const;
  // ZeRO-3's reduce-scatter staging (fp32, MemoryPlan::shard_staging bytes).
  Tensor shard_staging() const;

 private:
  void* take(size_t bytes, Context& ctx);
  Device device_;
  size_t slot_bytes_ = 0;
  MemoryPlan plan_;
  // The categories, then the optimizer state, the ZeRO-3 shards and staging,
  // and the fp8 scaling state.
  std::array<void*, model::kNumCategories + 5> blocks_{};
  size_t allocated_ = 0;
};

std::string format_bytes(double bytes);

}  // namespace trainer::engine
