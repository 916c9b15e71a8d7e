// Slices of global tensors and the overlap copy used by resharding loads.
#include "engine/checkpoint/slice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/error.h"

namespace trainer::engine::checkpoint {

int64_t Slice::block_numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Slice::numel() const { return (flat_end < 0 ? block_numel() : flat_end) - flat_begin; }

namespace {
Json int_array(const std::vector<int64_t>& v) {
  Json a = Json::array();
  for (int64_t x : v) a.push(Json(x));
  return a;
}
std::vector<int64_t> read_ints(const Json& j) {
  std::vector<int64_t> v;
  for (const Json& x : j.items()) v.push_back(x.as_int());
  return v;
}
}  // namespace

Json Slice::to_json() const {
  Json j = Json::object();
  j.set("global_shape", int_array(global_shape));
  j.set("offset", int_array(offset));
  j.set("shape", int_array(shape));
  j.set("tp_dim", Json(tp_dim));
  j.set("valid_rows", Json(valid_rows));
  Json range = Json::array();
  range.push(Json(flat_begin));
  range.push(Json(flat_end < 0 ? block_numel() : flat_end));
  j.set("flat_range", std::move(range));
  return j;
}

Slice Slice::from_json(const Json& j, const std::string& where) {
  Slice s;
  try {
    s.global_shape = read_ints(j.at("global_shape"));
    s.offset = read_ints(j.at("offset"));
    s.shape = read_ints(j.at("shape"));
    s.tp_dim = static_cast<int>(j.at("tp_dim").as_int());
    s.valid_rows = j.at("valid_rows").as_int();
    const auto& range = j.at("flat_range").items();
    if (range.size() != 2) throw std::runtime_error("flat_range must have 2 entries");
    s.flat_begin = range[0].as_int();
    s.flat_end = range[1].as_int();
  } catch (const std::runtime_error& e) {
    throw InputError(fmt::format("{}: bad slice description: {}", where, e.what()));
  }
  bool ok = !s.shape.empty() && s.shape.size() <= 2 && s.offset.size() == s.shape.size() &&
            s.global_shape.size() == s.shape.size();
  for (size_t d = 0; ok && d < s.shape.size(); ++d)
    ok = s.offset[d] >= 0 && s.shape[d] >= 0 && s.offset[d] + s.shape[d] <= s.global_shape[d];
  ok = ok && s.flat_begin >= 0 && s.flat_begin <= s.flat_end && s.flat_end <= s.block_numel();
  TRAINER_INPUT_CHECK(ok, "{}: slice offset/shape/flat_range do not fit its global shape", where);
  return s;
}

Slice Slice::whole(const std::vector<int64_t>& global_shape, int tp_dim, int64_t valid_rows) {
  Slice s;
  s.global_shape = global_shape;
  s.offset.assign(global_shape.size(), 0);
  s.shape = global_shape;
  s.tp_dim = tp_dim;
  s.valid_rows = valid_rows;
  return s;
}

ShardPosition shard_position(const MeshPlace& place) {
  ShardPosition pos;
  pos.tp_rank = place.tp;
  // ZeRO-3: every dp rank holds (and writes) its own shard of the values.
  pos.write_params = (place.dp == 0 || place.zero == 3) && place.cp == 0;
  pos.write_replicated = place.dp == 0 && place.cp == 0;
  pos.write_expert_replicated =
      place.ep_size > 1 ? place.cp == 0 && place.edp == 0 : pos.write_replicated;
  if (place.zero == 3) {
    // Every rank holds its own shard of every unit, with ep its experts'
    // shard over edp and the dense parts' over dp: all of it is written.
    pos.write_optimizer = pos.write_expert_params = pos.write_expert_optimizer = pos.write_params;
    return pos;
  }
  if (place.ep_size <= 1) {
    bool zero_sharded = place.zero >= 1 && place.dp_size > 1;
    pos.write_optimizer = place.cp == 0 && (place.dp == 0 || zero_sharded);
    pos.write_expert_params = pos.write_params;
    pos.write_expert_optimizer = pos.write_optimizer;
    return pos;
  }
  // ZeRO 1/2 by unit part: the dense state sharded over dp, each ep rank's
  // experts' over its edp group.
  const bool dense_sharded = place.zero >= 1 && place.dp_size > 1;
  const bool experts_sharded = place.zero >= 1 && place.dp_size / place.ep_size > 1;
  pos.write_optimizer = place.cp == 0 && (place.dp == 0 || dense_sharded);
  pos.write_expert_params = place.cp == 0 && place.edp == 0;
  pos.write_expert_optimizer = place.cp == 0 && (place.edp == 0 || experts_sharded);
  return pos;
}

Slice local_slice(const model::ParamSpec& spec, const std::vector<int64_t>& local_shape,
                  const ShardPosition& pos) {
  Slice s;
  s.global_shape = spec.global_shape;
  s.shape = local_shape;
  s.offset.assign(local_shape.size(), 0);
  s.tp_dim = spec.tp_dim;
  s.valid_rows = spec.valid_rows;
  TRAINER_CHECK(local_shape.size() == spec.global_shape.size(), "{}: local rank {} vs global rank {}",
                spec.name, local_shape.size(), spec.global_shape.size());
  if (spec.tp_dim >= 0 && local_shape[spec.tp_dim] != spec.global_shape[spec.tp_dim])
    s.offset[spec.tp_dim] =
        static_cast<int64_t>(pos.tp_rank / spec.tp_replicas) * local_shape[spec.tp_dim];
  return s;
}

int64_t required_elements(const Slice& dst) {
  const int64_t row = dst.shape.size() == 2 ? dst.shape[1] : 1;
  const int64_t end = dst.flat_end < 0 ? dst.block_numel() : dst.flat_end;
  if (dst.valid_rows < 0) return end - dst.flat_begin;
  int64_t rows = std::clamp<int64_t>(dst.valid_rows - dst.offset[0], 0, dst.shape[0]);
  return std::max<int64_t>(0, std::min(end, rows * row) - dst.flat_begin);
}

int64_t copy_overlap(const Slice& src, const float* src_data, const Slice& dst, float* dst_data) {
  const size_t nd = dst.shape.size();
  TRAINER_CHECK(src.shape.size() == nd && (nd == 1 || nd == 2), "slice ranks differ");
  int64_t lo[2] = {0, 0}, hi[2] = {1, 1};
  for (size_t d = 0; d < nd; ++d) {
    lo[d] = std::max(src.offset[d], dst.offset[d]);
    hi[d] = std::min(src.offset[d] + src.shape[d], dst.offset[d] + dst.shape[d]);
  }
  // Padding rows are never copied: they are zero on every layout.
  int64_t valid = INT64_MAX;
  if (src.valid_rows >= 0) valid = std::min(valid, src.valid_rows);
  if (dst.valid_rows >= 0) valid = std::min(valid, dst.valid_rows);
  hi[0] = std::min(hi[0], valid);
  if (hi[0] <= lo[0] || hi[1] <= lo[1]) return 0;
  const int64_t src_row = nd == 2 ? src.shape[1] : 1, dst_row = nd == 2 ? dst.shape[1] : 1;
  const int64_t src_col0 = nd == 2 ? src.offset[1] : 0, dst_col0 = nd == 2 ? dst.offset[1] : 0;
  const int64_t src_end = src.flat_end < 0 ? src.block_numel() : src.flat_end;
  const int64_t dst_end = dst.flat_end < 0 ? dst.block_numel() : dst.flat_end;
  int64_t copied = 0;
  for (int64_t r = lo[0]; r < hi[0]; ++r) {
    // Flat indices of columns lo[1]..hi[1] of row r in each block, clipped to the held ranges.
    int64_t s0 = (r - src.offset[0]) * src_row + (lo[1] - src_col0);
    int64_t d0 = (r - dst.offset[0]) * dst_row + (lo[1] - dst_col0);
    int64_t c_begin = std::max<int64_t>({0, src.flat_begin - s0, dst.flat_begin - d0});
    int64_t c_end = std::min<int64_t>({hi[1] - lo[1], src_end - s0, dst_end - d0});
    if (c_end <= c_begin) continue;
    std::memcpy(dst_data + (d0 + c_begin - dst.flat_begin), src_data + (s0 + c_begin - src.flat_begin),
                static_cast<size_t>(c_end - c_begin) * sizeof(float));
    copied += c_end - c_begin;
  }
  return copied;
}

}  // namespace trainer::engine::checkpoint
