// ZeRO layouts (see zero_layout.h).
#include "engine/zero_layout.h"

#include <algorithm>

#include "kernels/error.h"
#include "parallel/grad_sync.h"

namespace trainer::engine {

parallel::Axis zero_axis(const parallel::MeshShape& shape) {
  if (shape.ep > 1) return parallel::Axis::edp;
  return shape.cp > 1 ? parallel::Axis::dp_cp : parallel::Axis::dp;
}

int64_t zero_shard_align(int zero, int size) { return zero == 3 ? int64_t(size) * 64 : 0; }

ZeroLayout arena_range_layout(const model::Buffers& buffers, int64_t begin, int64_t end) {
  const int64_t arena =
      static_cast<int64_t>(buffers.category_bytes(model::Category::parameters) / sizeof(float));
  ZeroLayout z;
  if (end < 0) end = arena;
  TRAINER_CHECK(0 <= begin && begin <= end, "optimizer range [{}, {})", begin, end);
  z.owned.push_back({0, static_cast<int>(buffers.params().size()), 0, begin, end, 0});
  z.state_elems = end - begin;
  return z;
}

ZeroLayout zero_layout(const model::Buffers& buffers, int zero, int size, int rank) {
  if (zero < 3) {
    const int64_t arena =
        static_cast<int64_t>(buffers.category_bytes(model::Category::parameters) / sizeof(float));
    const bool sharded = zero >= 1 && size > 1;
    parallel::ZeroShard s = parallel::zero_shard(arena, sharded ? size : 1, sharded ? rank : 0);
    ZeroLayout z = arena_range_layout(buffers, s.begin, s.end());
    z.stage = zero;
    z.arena_elems = s.padded;
    z.arena_shard = s;
    return z;
  }
  TRAINER_CHECK(buffers.blocks_shared(), "ZeRO-3 layout of a model declared without shared blocks");
  ZeroLayout z;
  z.stage = 3;
  for (const model::Buffers::ParamUnit& u : buffers.param_units()) {
    // Units are padded to a multiple of size * 64 (ModelConfig::shard_align):
    // equal, aligned shards.
    parallel::ZeroShard s = parallel::zero_shard(u.padded, size, rank);
    TRAINER_CHECK(s.padded == u.padded, "parameter unit of {} elements not padded for {} shards",
                  u.padded, size);
    z.owned.push_back({u.param_begin, u.param_end, u.first, s.begin, s.end(), z.state_elems});
    z.state_elems += s.shard;
    z.max_unit_shard = std::max(z.max_unit_shard, s.shard);
  }
  return z;
}

OwnedPart owned_part(const ZeroLayout& layout, const model::Buffers& buffers, int param) {
  const model::Buffers::Param& p = buffers.params().at(param);
  const model::BufferInfo& info = buffers.buffers()[p.value];
  const int64_t first = static_cast<int64_t>(info.offset / sizeof(float));
  const int64_t count = static_cast<int64_t>(info.bytes / sizeof(float));
  for (const OwnedRange& r : layout.owned) {
    if (param < r.param_begin || param >= r.param_end) continue;
    const int64_t a = std::max(first, r.unit_first + r.begin);
    const int64_t b = std::min(first + count, r.unit_first + r.end);
    if (a >= b) return {};
    return {a - first, b - first, r.state_at + a - (r.unit_first + r.begin)};
  }
  return {};
}

}  // namespace trainer::engine
