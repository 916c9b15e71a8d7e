// ZeroLayout: which parameter elements this rank's optimizer state covers.
// ZeRO 0 and 1 shard the flat parameter arena as one range (all of it without
// sharding; ZeRO 2 too on one rank); ZeRO-3 shards each parameter unit (embedding, block, head) over
// dp, so a unit is all-gathered in one collective of equal shards, and this
// rank then holds its shard of every unit's fp32 parameters and gradients as
// well as of their AdamW moments, back to back in unit order. With experts
// split over ep, every stage shards a block's routed experts over edp (the
// ranks holding the same experts) and the rest over dp, as Megatron-Core's
// distributed optimizer and DeepSpeed-MoE do: each unit part
// (Buffers::ParamUnit::parts) over its own group. ZeRO 1 then keeps whole
// parameters and gradients (its collectives: engine/zero_part_sync.h).
//
// ZeRO-2 over more than one rank (DeepSpeed's stage 2) uses the same unit
// parts: parameters stay whole, but every block's gradients go to one region
// all blocks share, and right after a block's backward they are
// reduce-scattered into this rank's gradient shard (engine/sharded_params.h),
// so only the embedding's, the head's, one block's and the shard are held.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/buffers.h"
#include "model/model_config.h"
#include "parallel/grad_sync.h"
#include "parallel/mesh_shape.h"

namespace trainer::engine {

struct OwnedRange {
  int param_begin = 0, param_end = 0;  // the parameters it can intersect
  int64_t unit_first = 0;              // arena element that begin and end count from
  int64_t begin = 0, end = 0;          // held elements [unit_first + begin, unit_first + end)
  int64_t state_at = 0;                // where they start in m and v (ZeRO-3: and in the shards)
  bool expert = false;                 // ZeRO-3: a part of routed experts (sharded over edp)
  int64_t size() const { return end - begin; }
};

struct ZeroLayout {
  int stage = 0;                  // parallel.zero
  // By unit parts (ZeRO-3, ZeRO-2 over > 1 rank, ZeRO 1 with experts apart): one per part of
  // each Buffers::param_units() entry; else one range of the flat arena.
  std::vector<OwnedRange> owned;
  std::vector<int> unit_begin;    // by unit parts: unit u's, owned[unit_begin[u], unit_begin[u + 1])
  int64_t state_elems = 0;        // elements of m (and v), the sum of owned sizes
  int64_t arena_elems = 0;        // ZeRO 0-2 flat: the arenas padded to equal shards; 0 = as declared
  int64_t max_unit_shard = 0;     // the largest part shard (ZeRO-2/3: reduce-scatter staging)
  int64_t max_unit_state = 0;     // the largest unit's shard, all its parts
  // ZeRO 0-2: this rank's range of the flat arena (the whole of it unsharded
  // or by unit parts), what ZeRO 1's parameter all-gather takes.
  parallel::ZeroShard arena_shard;
  bool grads_shared = false;      // the blocks' gradients share one region (ZeRO-2/3)
  int regions = 1;                // or alternate between two (Buffers::shared_regions)
  // Reduce-scatter staging, in elements: one part shard, or with two regions
  // a whole unit's shard per region (ShardedParams keeps each region's
  // reduce-scatter result until that region is next used).
  int64_t staging_elems() const { return regions == 2 ? 2 * max_unit_state : max_unit_shard; }
  bool shards_parameters() const { return stage == 3; }
  // The reduced gradients live in this rank's shard (AdamW::grad_shards), not the arena.
  bool shards_gradients() const { return stage == 3 || (stage == 2 && grads_shared); }
  bool by_unit_parts() const { return !unit_begin.empty(); }
  std::span<const OwnedRange> unit_parts(int unit) const;  // ZeRO-3
};

// The axes ZeRO shards over. dense: the gradient group (dp, or dp x cp with
// context parallelism: cp ranks hold the same parameters). expert: the
// routed experts', edp when experts are split over ep and ZeRO shards (the
// ranks holding the same experts at the same offsets), else the same as dense.
struct ZeroAxes {
  parallel::Axis dense = parallel::Axis::dp, expert = parallel::Axis::dp;
  bool experts_apart() const { return dense != expert; }
};
ZeroAxes zero_axes(const parallel::MeshShape& shape, int zero);
// ModelConfig::shard_align for `zero` over `size` dense ranks: size * 64
// elements (aligned shards) where ZeRO shards by unit part (ZeRO-3, ZeRO-2
// over size > 1, or experts apart), else 0 (the flat arena is sharded as one
// range).
int64_t zero_shard_align(int zero, int size, bool experts_apart);
// ZeRO-2/3 over more than one rank of a mesh whose backward uses no
// communicator but the gradient group's (tp, cp, pp and ep 1): blocks
// alternate between two shared regions, so that on GPUs a block's
// reduce-scatter (and under ZeRO-3 the next block's all-gather) runs on the
// communication stream while the next block computes, as FSDP's prefetch
// and DeepSpeed's overlap_comm do. Elsewhere backward's own collectives
// (tp, cp, pipeline, expert all-to-all) would run on another NCCL
// communicator at the same time, which NCCL documents as unsafe unless
// ordered (the rule the dp buckets follow too). Decided by the mesh alone, so
// the memory plan is the same on every device.
// `overlap`: parallel.zero_overlap (false: one region, one block's memory less).
bool zero_double_buffers(const parallel::MeshShape& shape, int zero, bool overlap);
// The model's side of the layout (ModelConfig::shard_align, share_blocks,
// shard_experts_apart, shared_regions) for `zero` over `axes`, `dense_size`
// ranks sharing the dense state: what Trainer::setup and `trainer plan` both
// declare.
void apply_zero_sharding(model::ModelConfig& cfg, int zero, const ZeroAxes& axes, int dense_size,
                         bool double_buffer = false);

// `size` ranks share the state; this is `rank`.
struct ZeroGroup {
  int size = 1, rank = 0;
};
// dense: the group of ZeroAxes::dense; experts: of ZeroAxes::expert (read for
// the expert parts of a model declared with shard_experts_apart only).
ZeroLayout zero_layout(const model::Buffers& buffers, int zero, ZeroGroup dense, ZeroGroup experts);
// ZeRO 0-2 over arena elements [begin, end) (end < 0: the whole arena).
ZeroLayout arena_range_layout(const model::Buffers& buffers, int64_t begin, int64_t end);

// The part of parameter `param` (index into buffers.params()) whose state
// this rank holds: its flat elements [lo, hi), from state_at in m and v.
struct OwnedPart {
  int64_t lo = 0, hi = 0, state_at = 0;
  bool empty() const { return hi <= lo; }
  int64_t size() const { return hi - lo; }
};
OwnedPart owned_part(const ZeroLayout& layout, const model::Buffers& buffers, int param);

}  // namespace trainer::engine
