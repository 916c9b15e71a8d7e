// In-place collectives over ZeRO unit parts (see zero_part_sync.h).
#include "engine/zero_part_sync.h"

#include "kernels/error.h"

namespace trainer::engine {

namespace {

// The whole part of owned range `r` (its group's shards side by side) in `flat`.
Tensor whole_part(const OwnedRange& r, const Tensor& flat, const parallel::Communicator& group) {
  const int64_t whole = r.size() * group.size();
  TRAINER_CHECK(r.begin == r.size() * group.rank() && r.unit_first + whole <= flat.numel(),
                "unit part shard [{}, {}) is not rank {}'s of {}", r.begin, r.end, group.rank(),
                group.size());
  return flat.slice(r.unit_first, r.unit_first + whole);
}

void check_arena_layout(const ZeroLayout& layout, const char* what) {
  TRAINER_CHECK(layout.by_unit_parts() && !layout.shards_parameters(),
                "{}: ZeRO {} is not sharded by unit part in the arenas", what, layout.stage);
}

}  // namespace

void gather_updated_parts(const ZeroLayout& layout, Tensor arena, parallel::Communicator& dense,
                          parallel::Communicator& experts) {
  check_arena_layout(layout, "gather_updated_parts");
  Tensor flat = arena.view({arena.numel()});
  for (const OwnedRange& r : layout.owned) {
    parallel::Communicator& group = r.expert ? experts : dense;
    if (group.size() == 1) continue;
    group.all_gather(flat.slice(r.unit_first + r.begin, r.unit_first + r.end),
                     whole_part(r, flat, group));
  }
}

}  // namespace trainer::engine
