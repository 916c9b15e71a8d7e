// PipelineRunner: one training step of this rank's pipeline stage, run by the
// 1F1B or interleaved 1F1B table of parallel/pipeline_schedule.h over the
// model's stage I/O, with one activation slot (room for one model chunk's
// activations) per (micro-batch, chunk) in flight.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "engine/memory_plan.h"
#include "model/model.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"

namespace trainer::engine {

// Sets cfg's stage fields for pp rank `pp_rank` of `pp_size`: one contiguous
// block of layers per rank (virtual_stages 1), or virtual_stages chunks, chunk
// c = global stage c * pp_size + pp_rank of pp_size * virtual_stages (Megatron's
// interleaved layout). Rank 0 holds the embedding (on chunk 0), the last rank
// the head (on its last chunk).
void apply_pipeline_stage(model::ModelConfig& cfg, int pp_size, int pp_rank,
                          int virtual_stages = 1);

// Activation slots a table needs when a (micro-batch, chunk) takes one at its
// first action (receive or forward) and frees it after its backward: in all
// (activation_slots), and per model chunk, each chunk drawing on its own pool
// (chunk_slots, `chunks` entries).
int activation_slots(const parallel::Schedule& table);
std::vector<int> chunk_slots(const parallel::Schedule& table, int chunks);

// The memory plan's slot pools for `model` run by `table`: (slots, bytes) per
// model chunk (MemoryPlan::chunk_slots).
std::vector<std::pair<int, size_t>> activation_slot_plan(const parallel::Schedule& table,
                                                         const model::Model& model);

class PipelineRunner {
 public:
  // The table of pp rank `pp.rank()` for num_micro_batches micro-batches:
  // 1F1B, or interleaved over virtual_stages model chunks.
  PipelineRunner(parallel::Communicator& pp, int num_micro_batches, int virtual_stages = 1);

  const parallel::Schedule& table() const { return table_; }

  // Runs the table once. load(mb, chunk) fills the micro-batch's ids/targets
  // and document layout (called just before the forward of a chunk with the
  // embedding or the head, or of every chunk when the model takes the
  // documents, with its slot bound); each backward scales the loss by dloss
  // (MoE aux losses by aux_dloss). on_loss() runs after each forward of the
  // chunk with the head (last stage only), to take its token losses. Leaves
  // chunk 0 bound to slot 0.
  void run_step(model::Model& model, Context& ctx, const Arenas& arenas,
                const std::function<void(int mb, int chunk)>& load,
                const std::function<void()>& on_loss, float dloss, float aux_dloss);

  // Forward only (evaluation): one micro-batch through every global stage in
  // order, each chunk in its first activation slot; load(chunk) as for run_step. Blocking
  // point-to-point is safe: one transfer is in flight at a time. on_loss as
  // for run_step.
  void run_forward(model::Model& model, Context& ctx, const Arenas& arenas,
                   const std::function<void(int chunk)>& load, const std::function<void()>& on_loss);

 private:
  parallel::Communicator& pp_;
  parallel::Schedule table_;
  int chunks_ = 1;
  std::vector<int> slots_;  // per model chunk
};

}  // namespace trainer::engine
