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
//
// With experts split over ep, a block's routed experts are parts of the unit
// of their own (Buffers::ParamUnit::parts), gathered and reduce-scattered
// over edp, the ranks holding the same experts, the rest over dp (x cp).
//
// ZeRO-2 over more than one rank (DeepSpeed's stage 2) is the gradient half
// of this: parameters stay whole in their arena (nothing is gathered before a
// block runs; after the update each rank's updated part is all-gathered in
// place, as ZeRO 1 does), but the blocks' gradients share one region and are
// reduce-scattered into this rank's gradient shard right after each block's
// backward, every micro-batch, so the gradient memory is the embedding's, the
// head's and one block's plus the shard, not the whole model's.
#pragma once

#include <functional>

#include "engine/optimizer.h"
#include "kernels/context.h"
#include "model/model.h"
#include "parallel/communicator.h"
#include "parallel/stream_order.h"

namespace trainer::engine {

class ShardedParams : public model::BlockParamHooks {
 public:
  // `optimizer` holds the shards (bound before any call below) of a ZeRO-3
  // layout, or of a ZeRO-2 one whose blocks share gradients; `staging` is
  // scratch of ZeroLayout::staging_elems() elements. `dp`
  // shards the dense parts, `edp` the expert parts (the same communicator
  // unless experts are set apart).
  ShardedParams(model::Model& model, AdamW& optimizer, parallel::Communicator& dp,
                parallel::Communicator& edp, Context& ctx, Tensor staging);

  // Every unit from the counter-based RNG, keeping this rank's shard (ZeRO-2: all of it).
  void init_parameters();
  // The embedding and head units, gathered for the step (and their compute
  // copies); ZeRO-2: every unit's updated parts, gathered in place.
  void gather_whole_step();
  // After backward, finish_gradients and the tied-table sum: the embedding
  // and head gradients into this rank's shard.
  void reduce_whole_step();
  // Gradient shards to zero (a step's start; the arenas are zeroed by the model).
  void zero_grads();
  // Two regions: the compute stream waits for every collective issued, and
  // pending reduce-scatter results are added to the gradient shard (the
  // calls above that touch shards do it first).
  void drain();

  // Runs `change` on the gathered unit and keeps this rank's shard of what it
  // wrote: parameters changed outside the optimizer (aux_free's expert bias;
  // every rank changes them alike). ZeRO-2: just runs it.
  void update_outside_optimizer(int unit, const std::function<void()>& change);

  void gather(int unit, bool for_backward) override;
  void release_gradients(int unit) override;

  // Collectives issued so far (all-gathers, reduce-scatters; one per unit
  // part): what a test counts to see each block gathered for forward and
  // again for backward.
  int64_t gathers() const { return gathers_; }
  int64_t reduce_scatters() const { return reduce_scatters_; }

 private:
  // (padded) the elements of part `part` of unit `unit` in the arena.
  Tensor arena_part(model::Category category, int unit, int part) const;
  parallel::Communicator& group(const OwnedRange& r) const { return r.expert ? edp_ : dp_; }
  void reduce_scatter(int unit);
  void keep_shards(int unit);  // the gathered unit's values into this rank's shards
  void all_gather(int unit);   // its shards into its region (parameters)
  void zero_unit_grads(int unit);
  // Two regions: the unit a block's gather prefetches (the next block in
  // forward, the previous one in backward), or -1.
  int next_block(int unit, bool for_backward) const;
  void gather_overlapped(int unit, bool for_backward);
  void reduce_scatter_overlapped(int unit);
  void land(int region);  // a region's pending reduce-scatter result into the gradient shard
  void refresh(int unit, int region);  // its compute copies, unless already cast
  void forget_gathered();
  // Part r of a unit (`parts`) in a region's staging.
  Tensor staged(int region, std::span<const OwnedRange> parts, const OwnedRange& r) const;
  // A reduce-scattered part (averaged over its group) into the gradient shard.
  void add_to_shard(const OwnedRange& r, Tensor part);

  model::Model& model_;
  AdamW& optimizer_;
  parallel::Communicator& dp_;
  parallel::Communicator& edp_;
  Context& ctx_;
  Tensor staging_;
  bool whole_params_;  // ZeRO-2: the parameter arena holds every unit whole
  int regions_;        // ZeroLayout::regions
  std::unique_ptr<parallel::CommStreamOverlap> fences_;  // two regions: one fence each
  // Per region: the unit whose parameters it holds (or will, once the
  // gather issued lands), the unit its compute copies were cast for, and
  // the unit whose reduce-scatter result its staging holds (-1: none). A
  // block still in its region is not gathered again: the last block at the
  // turn from forward to backward (with two regions the one before it too),
  // the first ones at the turn to the next micro-batch, as FSDP keeps the
  // last block unsharded after forward. Forgotten whenever the shards may
  // change (optimizer step, loading, updates outside the optimizer).
  std::array<int, 2> resident_{-1, -1}, fresh_{-1, -1}, scattered_{-1, -1};
  int64_t gathers_ = 0, reduce_scatters_ = 0;
};

}  // namespace trainer::engine
