// Slice: which part of a parameter's global tensor a shard holds (offset and
// shape per dim), and the copy of the overlap between two slices. This is what
// lets a checkpoint written on one layout load on any other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/json.h"
#include "model/buffers.h"

namespace trainer::engine::checkpoint {

struct Slice {
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offset;  // first element held, per dim
  std::vector<int64_t> shape;   // elements held, per dim
  int tp_dim = -1;              // the dim tensor parallelism splits (-1 = replicated)
  int64_t valid_rows = -1;      // rows >= this are padding (padded vocabulary); -1 = all
  // Held elements [flat_begin, flat_end) of the block's row-major order: a
  // ZeRO shard of optimizer state covers an arbitrary range of the flat arena.
  int64_t flat_begin = 0;
  int64_t flat_end = -1;        // -1 = the whole block
  int64_t block_numel() const;  // product of shape
  int64_t numel() const;        // elements held: flat_end - flat_begin

  Json to_json() const;
  // The whole tensor of `global_shape` (what one rank holds without sharding).
  static Slice whole(const std::vector<int64_t>& global_shape, int tp_dim = -1,
                     int64_t valid_rows = -1);
  // InputError naming `where` when the JSON does not describe a slice.
  static Slice from_json(const Json& j, const std::string& where);
};

// Where this rank's copy of each parameter sits in the global tensor: TP
// splits tp_dim evenly, so shard `tp_rank` starts at tp_rank * local size
// (tp_rank / tp_replicas * local size for a shard held by several tp ranks).
struct ShardPosition {
  int tp_rank = 0;
  // False on data-parallel replicas whose parameters another rank writes
  // (only dp_idx == 0 and cp_idx == 0 write them; every dp rank under ZeRO-3,
  // each its shard).
  bool write_params = true;
  // The one copy of per-rank state every data-parallel replica holds alike
  // (fp8 scaling): dp_idx == 0 and cp_idx == 0 only, even under ZeRO-3, where
  // write_params is true on every dp rank.
  bool write_replicated = true;
  // False on replicas whose whole optimizer state another rank writes (zero 0
  // with dp > 1); true for every rank holding a ZeRO shard of it.
  bool write_optimizer = true;
  // The same two for routed experts, which expert parallelism spreads over
  // the ep ranks (each holds E / ep of them under their global names
  // experts.{e}): the first replica of each expert (edp index 0) writes them.
  bool write_expert_params = true;
  bool write_expert_optimizer = true;
  // write_replicated for routed experts' per-rank state (their fp8 scaling):
  // each expert's first replica (edp index 0, cp 0), even under ZeRO-3.
  bool write_expert_replicated = true;
  bool writes_params(const model::ParamSpec& spec) const {
    return spec.expert ? write_expert_params : write_params;
  }
  bool writes_optimizer(const model::ParamSpec& spec) const {
    return spec.expert ? write_expert_optimizer : write_optimizer;
  }
  bool writes_anything() const {
    return write_params || write_optimizer || write_expert_params || write_expert_optimizer;
  }
};

// This rank's position on a mesh: tp rank; parameters written by dp = cp = 0;
// optimizer state also by the other dp ranks when ZeRO shards it over dp.
// With expert parallelism (ep_size > 1) routed experts are written by edp =
// 0, their state also by the other edp ranks when ZeRO shards it over edp
// (zero_layout.h).
// Under ZeRO-3 every rank (of cp index 0) writes its shards of everything.
struct MeshPlace {
  int tp = 0, dp = 0, cp = 0;
  int dp_size = 1;
  int zero = 0;
  int ep = 0, ep_size = 1;  // this rank's ep index and the ep group size
  int edp = 0;              // its expert-data-parallel index (ep_size > 1 only)
};
ShardPosition shard_position(const MeshPlace& place);

Slice local_slice(const model::ParamSpec& spec, const std::vector<int64_t>& local_shape,
                  const ShardPosition& pos);

// Copies the elements `src` holds that `dst` wants (both stored as their flat
// range of their block, row-major) and that lie in the valid rows of both;
// returns the number copied. Global shapes must agree except dim 0 of padded tensors.
int64_t copy_overlap(const Slice& src, const float* src_data, const Slice& dst, float* dst_data);

// Elements of `dst` that a complete load must fill: those in valid rows.
int64_t required_elements(const Slice& dst);

}  // namespace trainer::engine::checkpoint
