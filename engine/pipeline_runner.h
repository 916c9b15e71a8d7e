// PipelineRunner: one training step of this rank's pipeline stage, run by the
// 1F1B table of parallel/pipeline_schedule.h over the model's stage I/O, with
// one activation slot (a copy of the activations arena) per micro-batch in flight.
#pragma once

#include <functional>
#include <vector>

#include "engine/memory_plan.h"
#include "model/model.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"

namespace trainer::engine {

// Sets cfg's stage fields for pp rank `pp_rank` of `pp_size` (1F1B: one
// contiguous block of layers per rank; the first holds the embedding, the last the head).
void apply_pipeline_stage(model::ModelConfig& cfg, int pp_size, int pp_rank);

// Activation slots a table needs when a micro-batch takes one at its first
// action (receive or forward) and frees it after its backward.
int activation_slots(const parallel::Schedule& table);

class PipelineRunner {
 public:
  // The 1F1B table of pp rank `pp.rank()` for num_micro_batches micro-batches.
  PipelineRunner(parallel::Communicator& pp, int num_micro_batches);

  const parallel::Schedule& table() const { return table_; }
  int slots() const { return slots_; }

  // Runs the table once. load(mb) fills the micro-batch's ids/targets (called
  // just before its forward, with its slot bound); each backward scales the
  // loss by dloss. Returns the summed token losses (non-zero on the last
  // stage only). Leaves slot 0 bound.
  double run_step(model::Model& model, Context& ctx, const Arenas& arenas,
                  const std::function<void(int mb)>& load,
                  const std::function<double()>& loss_sum, float dloss);

 private:
  parallel::Communicator& pp_;
  parallel::Schedule table_;
  int slots_ = 1;
};

}  // namespace trainer::engine
