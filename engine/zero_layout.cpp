// ZeRO layouts (see zero_layout.h).
#include "engine/zero_layout.h"

#include <algorithm>

#include "kernels/error.h"
#include "parallel/grad_sync.h"

namespace trainer::engine {

ZeroAxes zero_axes(const parallel::MeshShape& shape, int zero) {
  const parallel::Axis grads = shape.cp > 1 ? parallel::Axis::dp_cp : parallel::Axis::dp;
  if (shape.ep == 1 || zero == 0) return {grads, grads};
  return {grads, parallel::Axis::edp};
}

int64_t zero_shard_align(int zero, int size, bool experts_apart) {
  const bool by_part = zero == 3 || (zero == 2 && size > 1) || (zero >= 1 && experts_apart);
  return by_part ? int64_t(size) * 64 : 0;
}

bool zero_double_buffers(const parallel::MeshShape& shape, int zero, bool overlap) {
  return overlap && zero >= 2 && shape.dp > 1 && shape.tp == 1 && shape.cp == 1 && shape.pp == 1 &&
         shape.ep == 1;
}

void apply_zero_sharding(model::ModelConfig& cfg, int zero, const ZeroAxes& axes, int dense_size,
                         bool double_buffer) {
  cfg.shard_align = zero_shard_align(zero, dense_size, axes.experts_apart());
  cfg.share_blocks = zero == 3;
  cfg.share_block_grads = zero == 2 && dense_size > 1;
  cfg.shard_experts_apart = axes.experts_apart();
  cfg.shared_regions = double_buffer && (cfg.share_blocks || cfg.share_block_grads) ? 2 : 1;
}

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

ZeroLayout zero_layout(const model::Buffers& buffers, int zero, ZeroGroup dense,
                       ZeroGroup experts) {
  const int64_t arena =
      static_cast<int64_t>(buffers.category_bytes(model::Category::parameters) / sizeof(float));
  if (zero < 3 && !buffers.parts_padded()) {
    const bool sharded = zero >= 1 && dense.size > 1;
    parallel::ZeroShard s =
        parallel::zero_shard(arena, sharded ? dense.size : 1, sharded ? dense.rank : 0);
    ZeroLayout z = arena_range_layout(buffers, s.begin, s.end());
    z.stage = zero;
    z.arena_elems = s.padded;
    z.arena_shard = s;
    return z;
  }
  TRAINER_CHECK(buffers.blocks_shared() == (zero == 3),
                "ZeRO {} layout of a model declared {} shared blocks", zero,
                buffers.blocks_shared() ? "with" : "without");
  TRAINER_CHECK(zero != 2 || buffers.block_grads_shared() == (dense.size > 1),
                "ZeRO 2 layout over {} ranks of a model declared {} shared block gradients",
                dense.size, buffers.block_grads_shared() ? "with" : "without");
  ZeroLayout z;
  z.stage = zero;
  z.grads_shared = buffers.block_grads_shared();
  z.regions = buffers.shared_regions();
  // ZeRO 1/2 keep the whole arenas (as declared, padded by part).
  if (zero < 3) z.arena_shard = parallel::zero_shard(arena, 1, 0);
  for (const model::Buffers::ParamUnit& u : buffers.param_units()) {
    z.unit_begin.push_back(static_cast<int>(z.owned.size()));
    const int64_t unit_state_at = z.state_elems;
    for (const model::Buffers::ParamUnit::Part& part : u.parts) {
      // Parts are padded to a multiple of dense size * 64 (ModelConfig::
      // shard_align), a multiple of the expert group's too (edp divides dp):
      // equal, aligned shards either way.
      const ZeroGroup g = part.expert ? experts : dense;
      parallel::ZeroShard s = parallel::zero_shard(part.padded, g.size, g.rank);
      TRAINER_CHECK(s.padded == part.padded,
                    "parameter unit part of {} elements not padded for {} shards", part.padded,
                    g.size);
      z.owned.push_back({part.param_begin, part.param_end, part.first, s.begin, s.end(),
                         z.state_elems, part.expert});
      z.state_elems += s.shard;
      z.max_unit_shard = std::max(z.max_unit_shard, s.shard);
    }
    z.max_unit_state = std::max(z.max_unit_state, z.state_elems - unit_state_at);
  }
  z.unit_begin.push_back(static_cast<int>(z.owned.size()));
  return z;
}

std::span<const OwnedRange> ZeroLayout::unit_parts(int unit) const {
  TRAINER_CHECK(unit >= 0 && unit + 1 < static_cast<int>(unit_begin.size()),
                "parameter unit {} not in the ZeRO-3 layout", unit);
  return std::span<const OwnedRange>(owned).subspan(unit_begin[unit],
                                                    unit_begin[unit + 1] - unit_begin[unit]);
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
