// Slices: a tensor saved as row shards, column shards or ZeRO flat ranges is
// reassembled exactly into any other layout, padding rows excluded.
#include <catch2/catch.hpp>

#include <vector>

#include "engine/checkpoint/slice.h"

using namespace trainer;
using namespace trainer::engine::checkpoint;

namespace {

// Element (r, c) of the global tensor: a value that names its position.
float value_at(int64_t r, int64_t c) { return static_cast<float>(r * 100 + c); }

// The held elements of a slice, from the global formula (not from copy_overlap).
std::vector<float> held(const Slice& s) {
  std::vector<float> out;
  int64_t cols = s.shape.size() == 2 ? s.shape[1] : 1;
  int64_t end = s.flat_end < 0 ? s.block_numel() : s.flat_end;
  for (int64_t i = s.flat_begin; i < end; ++i) {
    int64_t r = s.offset[0] + i / cols, c = (s.shape.size() == 2 ? s.offset[1] : 0) + i % cols;
    bool pad = s.valid_rows >= 0 && r >= s.valid_rows;
    out.push_back(pad ? 0.0f : value_at(r, c));
  }
  return out;
}

Slice block(std::vector<int64_t> g, std::vector<int64_t> off, std::vector<int64_t> shape,
            int64_t fb = 0, int64_t fe = -1) {
  Slice s;
  s.global_shape = g;
  s.offset = off;
  s.shape = shape;
  s.flat_begin = fb;
  s.flat_end = fe;
  return s;
}

}  // namespace

TEST_CASE("slices: any saved layout loads into any other", "[cpu][checkpoint]") {
  const std::vector<int64_t> g = {6, 4};
  // Saved: two row shards (tp over dim 0), the second split into ZeRO flat ranges.
  std::vector<Slice> saved = {block(g, {0, 0}, {3, 4}), block(g, {3, 0}, {3, 4}, 0, 5),
                              block(g, {3, 0}, {3, 4}, 5, 12)};
  // Targets: whole tensor, column shards (tp over dim 1), a flat range crossing rows.
  std::vector<Slice> targets = {block(g, {0, 0}, {6, 4}), block(g, {0, 2}, {6, 2}),
                                block(g, {0, 0}, {6, 2}), block(g, {0, 0}, {6, 4}, 7, 19),
                                block(g, {2, 1}, {3, 3}, 1, 8)};
  for (const Slice& dst : targets) {
    std::vector<float> out(static_cast<size_t>(dst.numel()), -1.0f);
    int64_t copied = 0;
    for (const Slice& src : saved) copied += copy_overlap(src, held(src).data(), dst, out.data());
    CHECK(copied == dst.numel());
    CHECK(copied == required_elements(dst));
    CHECK(out == held(dst));
  }
}

TEST_CASE("slices: padded vocabulary rows are not copied across paddings", "[cpu][checkpoint]") {
  // Saved with padding to 8 rows, loaded with padding to 6; 5 valid rows.
  Slice src = block({8, 3}, {0, 0}, {8, 3});
  src.valid_rows = 5;
  Slice dst = block({6, 3}, {3, 0}, {3, 3});  // the second of two row shards
  dst.valid_rows = 5;
  std::vector<float> out(9, 0.0f);
  CHECK(copy_overlap(src, held(src).data(), dst, out.data()) == 6);
  CHECK(required_elements(dst) == 6);
  CHECK(out == held(dst));
}

TEST_CASE("slices: json round trip and refusal of a slice outside its tensor", "[cpu][checkpoint]") {
  Slice s = block({6, 4}, {3, 0}, {3, 4}, 2, 9);
  s.tp_dim = 0;
  s.valid_rows = 5;
  Slice r = Slice::from_json(s.to_json(), "x");
  CHECK(r.global_shape == s.global_shape);
  CHECK(r.offset == s.offset);
  CHECK(r.shape == s.shape);
  CHECK(r.flat_begin == 2);
  CHECK(r.flat_end == 9);
  CHECK(r.valid_rows == 5);
  CHECK(r.tp_dim == 0);
  Slice bad = block({6, 4}, {4, 0}, {3, 4});
  CHECK_THROWS_WITH(Slice::from_json(bad.to_json(), "shard.safetensors: tensor \"w\""),
                    Catch::StartsWith("shard.safetensors: tensor \"w\": slice"));
}

TEST_CASE("slices: which ranks write parameters and optimizer state", "[cpu][checkpoint]") {
  ShardPosition a = shard_position({.tp = 1, .dp = 0, .cp = 0, .dp_size = 2, .zero = 1});
  CHECK(a.tp_rank == 1);
  CHECK(a.write_params);
  CHECK(a.write_optimizer);
  ShardPosition b = shard_position({.tp = 0, .dp = 1, .cp = 0, .dp_size = 2, .zero = 1});
  CHECK(!b.write_params);
  CHECK(b.write_optimizer);  // its own ZeRO shard
  ShardPosition c = shard_position({.tp = 0, .dp = 1, .cp = 0, .dp_size = 2, .zero = 0});
  CHECK(!c.write_params);
  CHECK(!c.write_optimizer);  // a full replica of rank dp 0's state
  ShardPosition d = shard_position({.tp = 0, .dp = 0, .cp = 1, .dp_size = 1, .zero = 1});
  CHECK(!d.write_params);
  CHECK(!d.write_optimizer);
  // ZeRO-3: every dp rank writes its shard of the parameters, but the state
  // all replicas hold alike (fp8 scaling) only once.
  ShardPosition e = shard_position({.tp = 0, .dp = 1, .cp = 0, .dp_size = 2, .zero = 3});
  CHECK(e.write_params);
  CHECK(!e.write_replicated);
  CHECK(shard_position({.tp = 0, .dp = 0, .cp = 0, .dp_size = 2, .zero = 3}).write_replicated);
  CHECK(a.write_replicated);
  CHECK(!b.write_replicated);
}

TEST_CASE("slices: expert parallelism writes each expert once, ZeRO shards experts over edp",
          "[cpu][checkpoint]") {
  // dp 4 = ep 2 x edp 2 (dp index = edp * 2 + ep). Zero 0: dense by dp 0, the
  // experts of each ep rank by its edp 0 replica (dp 0 and dp 1).
  auto at = [](int dp, int zero) {
    return shard_position({.dp = dp, .dp_size = 4, .zero = zero, .ep = dp % 2, .ep_size = 2,
                           .edp = dp / 2});
  };
  for (int dp = 0; dp < 4; ++dp) {
    ShardPosition p = at(dp, 0);
    CHECK(p.write_params == (dp == 0));
    CHECK(p.write_optimizer == (dp == 0));
    CHECK(p.write_expert_params == (dp < 2));
    CHECK(p.write_expert_optimizer == (dp < 2));
  }
  // ZeRO 1/2: the dense state sharded over dp 4 and each ep rank's experts'
  // over edp 2: every rank writes its shard of both.
  for (int zero : {1, 2})
    for (int dp = 0; dp < 4; ++dp) {
      ShardPosition p = at(dp, zero);
      CHECK(p.write_params == (dp == 0));
      CHECK(p.write_optimizer);
      CHECK(p.write_expert_params == (dp < 2));
      CHECK(p.write_expert_optimizer);
    }
  // ep 2 = dp 2 (edp 1): the experts are not sharded, their first replica writes.
  for (int dp = 0; dp < 2; ++dp) {
    ShardPosition p =
        shard_position({.dp = dp, .dp_size = 2, .zero = 1, .ep = dp, .ep_size = 2, .edp = 0});
    CHECK(p.write_optimizer);
    CHECK(p.write_expert_optimizer);
  }
  model::ParamSpec expert{.name = "e", .global_shape = {1}, .expert = true};
  model::ParamSpec dense{.name = "d", .global_shape = {1}};
  ShardPosition q = at(1, 0);
  CHECK(q.writes_params(expert));
  CHECK(!q.writes_params(dense));
  CHECK(q.writes_anything());
  CHECK(!at(3, 0).writes_anything());
  // ZeRO-3: dense parts sharded over dp 4, experts over edp 2: every rank
  // holds (and writes) its own shard of both, the fp8 state once.
  for (int dp = 0; dp < 4; ++dp) {
    ShardPosition p = at(dp, 3);
    CHECK(p.write_params);
    CHECK(p.write_optimizer);
    CHECK(p.write_expert_params);
    CHECK(p.write_expert_optimizer);
    CHECK(p.write_replicated == (dp == 0));
  }
}
