// ShardedParams: ZeRO-3 (parallel.zero: 3, DeepSpeed's stage 3 / FSDP's
// full sharding). Each dp rank keeps only its shard of every parameter unit
// (ZeroLayout: the fp32 parameters, their gradients and AdamW moments); the
// arenas hold the embedding and head units for the whole step and one region
// every block shares (Buffers::share_block_parameters). Before a block runs
// forward, and again before its backward (and the recompute that precedes
// it), its shards are all-gathered over dp into that region and cast into
// its compute-dtype copies; right after its backward its gradients are
// reduce-scattered (averaged) into this rank's gradient shard. The
// embedding and head are gathered once per step (after the optimizer) and
// reduce-scattered after the whole backward, once the tensor-parallel and
// tied-table sums have run.
//
// Gathered in fp32, then cast: the compute copies are then exactly what ZeRO
// 0-2 compute (the rounding happens at the same place), and fp8's delayed
// scaling quantises from the fp32 weights as everywhere else; gathering bf16
// would halve the traffic at the cost of a second master-to-compute path.
#pragma once

#include <functional>

#include "engine/optimizer.h"
#include "kernels/context.h"
#include "model/model.h"
#include "parallel/communicator.h"

namespace trainer::engine {

class ShardedParams : public model::BlockParamHooks {
 public:
  // `optimizer` holds the shards (bound before any call below); `staging` is
  // one unit shard of scratch (ZeroLayout::max_unit_shard elements).
  ShardedParams(model::Model& model, AdamW& optimizer, parallel::Communicator& dp, Context& ctx,
                Tensor staging);

  // Every unit from the counter-based RNG, keeping this rank's shard.
  void init_parameters();
  // The embedding and head units, gathered for the step (and their compute copies).
  void gather_whole_step();
  // After backward, finish_gradients and the tied-table sum: the embedding
  // and head gradients into this rank's shard.
  void reduce_whole_step();
  // Gradient shards to zero (a step's start; the arenas are zeroed by the model).
  void zero_grads();

  // Runs `change` on the gathered unit and keeps this rank's shard of what it
  // wrote: parameters changed outside the optimizer (aux_free's expert bias;
  // every rank changes them alike).
  void update_outside_optimizer(int unit, const std::function<void()>& change);

  void gather(int unit, bool for_backward) override;
  void release_gradients(int unit) override;

  // Collectives issued so far (all-gathers, reduce-scatters): what a test
  // counts to see each block gathered for forward and again for backward.
  int64_t gathers() const { return gathers_; }
  int64_t reduce_scatters() const { return reduce_scatters_; }

 private:
  Tensor arena_range(model::Category category, int unit) const;  // (padded) the unit's elements
  void reduce_scatter(int unit);

  model::Model& model_;
  AdamW& optimizer_;
  parallel::Communicator& dp_;
  Context& ctx_;
  Tensor staging_;
  int64_t gathers_ = 0, reduce_scatters_ = 0;
};

}  // namespace trainer::engine
