// Mesh arithmetic (coordinates, groups) for small and huge meshes, and every
// resolve_mesh error message.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "kernels/error.h"
#include "parallel/mesh_shape.h"

using namespace trainer;
using namespace trainer::parallel;

namespace {

MeshShape make_shape(int tp, int cp, int dp, int pp, int ep = 1) {
  MeshShape s;
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.pp = pp;
  s.ep = ep;
  s.world = tp * cp * dp * pp;
  return s;
}

// Checks every rank against DESIGN.md's formula, enumerated independently,
// and that each axis partitions the world into groups of the right size.
void check_mesh(const MeshShape& s, bool check_world_axis) {
  int expected_rank = 0;
  for (int pp = 0; pp < s.pp; ++pp)
    for (int dp = 0; dp < s.dp; ++dp)
      for (int cp = 0; cp < s.cp; ++cp)
        for (int tp = 0; tp < s.tp; ++tp) {
          const int rank = ((pp * s.dp + dp) * s.cp + cp) * s.tp + tp;
          REQUIRE(rank == expected_rank++);
          const Coords c = coords_of(s, rank);
          REQUIRE(c.tp == tp);
          REQUIRE(c.cp == cp);
          REQUIRE(c.dp == dp);
          REQUIRE(c.pp == pp);
          REQUIRE(rank_of(s, tp, cp, dp, pp) == rank);
        }
  for (Axis axis : kAllAxes) {
    if (axis == Axis::world && !check_world_axis) continue;
    const int size = s.size(axis);
    std::vector<int> seen(s.world, 0);
    std::set<int> ids;
    for (int rank = 0; rank < s.world; ++rank) {
      const Coords c = coords_of(s, rank);
      const int id = group_id(s, axis, rank);
      REQUIRE(id >= 0);
      REQUIRE(id < s.world / size);
      if (c.along(axis) != 0) continue;  // each group visited once, from its member 0
      REQUIRE(ids.insert(id).second);
      const std::vector<int> members = group_ranks(s, axis, rank);
      REQUIRE(static_cast<int>(members.size()) == size);
      for (int k = 0; k < size; ++k) {
        const int m = members[k];
        REQUIRE(m >= 0);
        REQUIRE(m < s.world);
        ++seen[m];
        REQUIRE(coords_of(s, m).along(axis) == k);
        REQUIRE(group_id(s, axis, m) == id);
        REQUIRE(group_ranks(s, axis, m) == members);
      }
    }
    INFO("axis " << axis_name(axis));
    REQUIRE(static_cast<int>(ids.size()) == s.world / size);
    REQUIRE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

}  // namespace

TEST_CASE("tp2 dp2 pp2 groups match the rank layout by hand", "[cpu]") {
  const MeshShape s = make_shape(2, 1, 2, 2);
  // rank = tp + 2*(dp + 2*pp)
  REQUIRE(group_ranks(s, Axis::tp, 5) == std::vector<int>{4, 5});
  REQUIRE(group_ranks(s, Axis::dp, 5) == std::vector<int>{5, 7});
  REQUIRE(group_ranks(s, Axis::pp, 5) == std::vector<int>{1, 5});
  REQUIRE(group_ranks(s, Axis::dp, 0) == std::vector<int>{0, 2});
  REQUIRE(group_ranks(s, Axis::pp, 2) == std::vector<int>{2, 6});
  REQUIRE(group_ranks(s, Axis::cp, 6) == std::vector<int>{6});
  const Coords c = coords_of(s, 6);
  REQUIRE((c.tp == 0 && c.dp == 1 && c.pp == 1));
  check_mesh(s, true);
}

TEST_CASE("expert groups split dp x cp into consecutive groups of ep", "[cpu]") {
  const MeshShape s = make_shape(2, 1, 4, 1, 2);  // rank = tp + 2*dp
  REQUIRE(group_ranks(s, Axis::ep, 0) == std::vector<int>{0, 2});
  REQUIRE(group_ranks(s, Axis::ep, 6) == std::vector<int>{4, 6});
  REQUIRE(group_ranks(s, Axis::ep, 3) == std::vector<int>{1, 3});
  REQUIRE(group_ranks(s, Axis::edp, 0) == std::vector<int>{0, 4});
  REQUIRE(group_ranks(s, Axis::edp, 2) == std::vector<int>{2, 6});
  REQUIRE(group_ranks(s, Axis::edp, 7) == std::vector<int>{3, 7});
  REQUIRE(group_ranks(s, Axis::dp_cp, 3) == std::vector<int>{1, 3, 5, 7});
  check_mesh(s, true);
}

TEST_CASE("cp groups and dp_cp order", "[cpu]") {
  const MeshShape s = make_shape(2, 2, 2, 2, 2);  // rank = tp + 2*(cp + 2*(dp + 2*pp))
  REQUIRE(group_ranks(s, Axis::cp, 0) == std::vector<int>{0, 2});
  REQUIRE(group_ranks(s, Axis::dp_cp, 9) == std::vector<int>{9, 11, 13, 15});
  REQUIRE(group_ranks(s, Axis::ep, 13) == std::vector<int>{13, 15});
  REQUIRE(group_ranks(s, Axis::edp, 13) == std::vector<int>{9, 13});
  check_mesh(s, true);
  check_mesh(make_shape(3, 1, 5, 2, 5), true);
  check_mesh(make_shape(1, 1, 1, 1), true);
}

TEST_CASE("1024 and 16384 ranks computed without launching", "[cpu]") {
  MeshRequest r;
  r.world = 1024;
  r.tp = 8;
  r.pp = 4;
  r.ep = 4;
  r.n_experts = 64;
  r.n_layer = 32;
  r.n_head = 32;
  r.n_kv_head = 8;
  r.global_batch = 1024;
  r.micro_batch = 1;
  MeshShape s = resolve_mesh(r);
  REQUIRE(s.dp == 32);
  REQUIRE(s.edp() == 8);
  check_mesh(s, true);

  r.world = 16384;
  r.tp = 8;
  r.pp = 16;
  r.ep = 8;
  r.global_batch = 2048;
  s = resolve_mesh(r);
  REQUIRE(s.dp == 128);
  check_mesh(s, false);  // the world axis alone would be 16384^2 checks
  REQUIRE(group_ranks(s, Axis::world, 16383).back() == 16383);
  // Last rank: tp 7, dp 127, pp 15.
  const Coords c = coords_of(s, 16383);
  REQUIRE((c.tp == 7 && c.dp == 127 && c.pp == 15 && c.ep == 7 && c.edp == 15));
  REQUIRE(group_ranks(s, Axis::pp, 16383).front() == 16383 - 15 * 8 * 128);
}

namespace {
MeshRequest base_request() {
  MeshRequest r;
  r.world = 8;
  r.tp = 2;
  r.n_layer = 12;
  r.n_head = 12;
  r.n_kv_head = 4;
  r.global_batch = 16;
  r.micro_batch = 2;
  r.seq_len = 1024;
  return r;
}
void require_error(const MeshRequest& r, const std::string& message) {
  REQUIRE_THROWS_AS(resolve_mesh(r), InputError);
  REQUIRE_THROWS_WITH(resolve_mesh(r), message);
}
}  // namespace

TEST_CASE("resolve_mesh: auto dp and a valid request", "[cpu]") {
  MeshRequest r = base_request();
  MeshShape s = resolve_mesh(r);
  REQUIRE(s.dp == 4);
  REQUIRE(s.world == 8);
  r.dp = 4;
  REQUIRE(resolve_mesh(r).dp == 4);
  r.sequence_parallel = true;
  REQUIRE(resolve_mesh(r).sequence_parallel);
  r.rampup_start = 8;  // a ramp 8, 16 of micro-batches 2 on dp 4
  r.rampup_increment = 8;
  REQUIRE(resolve_mesh(r).dp == 4);
  r.zero = 3;  // ZeRO-3 (without ep)
  REQUIRE(resolve_mesh(r).zero == 3);
  // ZeRO-3 with experts split over ep: experts shard over edp 2, the rest over dp 4.
  r.ep = 2;
  r.n_experts = 4;
  s = resolve_mesh(r);
  REQUIRE(s.zero == 3);
  REQUIRE(s.ep == 2);
  REQUIRE(s.edp() == 2);
}

TEST_CASE("resolve_mesh: every error message", "[cpu]") {
  MeshRequest r;
  r = base_request(); r.world = 0;
  require_error(r, "parallel: world size 0 must be at least 1");
  r = base_request(); r.tp = 0;
  require_error(r, "parallel.tp: 0 must be at least 1");
  r = base_request(); r.pp = -1;
  require_error(r, "parallel.pp: -1 must be at least 1");
  r = base_request(); r.cp = 0;
  require_error(r, "parallel.cp: 0 must be at least 1");
  r = base_request(); r.ep = 0;
  require_error(r, "parallel.ep: 0 must be at least 1");
  r = base_request(); r.dp = -2;
  require_error(r, "parallel.dp: -2 must be auto or at least 1");
  r = base_request(); r.virtual_stages = 0;
  require_error(r, "parallel.virtual_stages: 0 must be at least 1");
  r = base_request(); r.zero = 4;
  require_error(r, "parallel.zero: 4 is not valid (0, 1, 2 or 3)");
  r = base_request(); r.cp = 2; r.seq_len = 1022;
  require_error(r, "train.seq_len: 1022 is not divisible by 2 * parallel.cp = 4 (context "
                   "parallelism splits each sequence into 2 * cp chunks)");
  r = base_request(); r.cp = 2;
  REQUIRE(resolve_mesh(r).dp_cp() == 4);  // dp 2 x cp 2 beside tp 2
  r = base_request(); r.cp = 4; r.seq_len = 36;
  require_error(r, "train.seq_len: 36 is not divisible by 2 * parallel.cp = 8 (context parallelism "
                   "splits each sequence into 2 * cp chunks)");
  r = base_request(); r.cp = 2; r.n_experts = 4; r.ep = 4;
  REQUIRE(resolve_mesh(r).ep == 4);  // ep splits the dp 2 x cp 2 ranks
  r = base_request(); r.tp = 4; r.cp = 2; r.sequence_parallel = true; r.seq_len = 12;
  require_error(r, "train.seq_len: 12 / parallel.cp 2 = 6 tokens per rank are not divisible by "
                   "parallel.tp 4 (sequence_parallel splits a rank's tokens over tp)");
  r = base_request(); r.tp = 3;
  require_error(r, "parallel: world 8 is not divisible by tp 3 * pp 1 * cp 1 = 3");
  r = base_request(); r.dp = 3;
  require_error(r, "parallel.dp: 3 but world 8 / (tp 2 * pp 1 * cp 1) = 4");
  r = base_request(); r.ep = 3;
  require_error(r, "parallel.ep: 3 does not divide dp 4 * cp 1 = 4");
  r = base_request(); r.ep = 2;
  require_error(r, "parallel.ep: 2 needs a model with experts (model.moe)");
  r = base_request(); r.ep = 4; r.n_experts = 6;
  require_error(r, "model.moe.n_experts: 6 is not divisible by parallel.ep 4");
  r = base_request(); r.world = 16; r.tp = 8; r.n_head = 12;
  require_error(r, "model.n_head: 12 is not divisible by parallel.tp 8");
  r = base_request(); r.world = 8; r.tp = 8; r.n_head = 24; r.n_kv_head = 12;
  require_error(r, "model.n_kv_head: 12 is not divisible by parallel.tp 8");
  r = base_request(); r.world = 8; r.tp = 8; r.n_head = 24; r.n_kv_head = 3;
  require_error(r, "model.n_kv_head: 3 is below parallel.tp 8 and does not divide it (KV heads "
                   "are replicated over tp / n_kv_head ranks)");
  r = base_request(); r.world = 8; r.tp = 8; r.n_head = 24; r.n_kv_head = 2;
  REQUIRE(resolve_mesh(r).tp == 8);  // 2 KV heads, each replicated on 4 ranks
  r = base_request(); r.virtual_stages = 2;
  require_error(r, "parallel.virtual_stages: 2 needs parallel.pp > 1");
  r = base_request(); r.pp = 4; r.tp = 1; r.n_head = 12;
  r.n_layer = 10;
  require_error(r, "model.n_layer: 10 is not divisible by parallel.pp 4 * parallel.virtual_stages "
                   "1 = 4");
  r = base_request(); r.pp = 2; r.tp = 1; r.virtual_stages = 4;
  require_error(r, "model.n_layer: 12 is not divisible by parallel.pp 2 * parallel.virtual_stages "
                   "4 = 8");
  r = base_request(); r.micro_batch = 3;
  require_error(r, "train.global_batch: 16 is not divisible by train.micro_batch 3 * dp 4 = 12");
  // train.rampup_batch_size: whole micro-batches on every dp rank at each size.
  r = base_request(); r.rampup_start = 4; r.rampup_increment = 4;
  require_error(r, "train.rampup_batch_size: start 4 and increment 4 must be multiples of "
                   "train.micro_batch 2 * dp 4 = 8, so each step of the ramp has whole micro-batches");
  r = base_request(); r.rampup_start = 8; r.rampup_increment = 4;
  require_error(r, "train.rampup_batch_size: start 8 and increment 4 must be multiples of "
                   "train.micro_batch 2 * dp 4 = 8, so each step of the ramp has whole micro-batches");
  r = base_request(); r.pp = 2; r.virtual_stages = 2; r.rampup_start = 4; r.rampup_increment = 4;
  require_error(r, "train.rampup_batch_size: start 4 and increment 4 must be multiples of "
                   "train.micro_batch 2 * dp 2 * parallel.pp 2 = 8, so each step of the ramp has "
                   "whole micro-batches in groups of pp (the interleaved schedule)");
  r = base_request(); r.world = 4; r.tp = 1; r.n_head = 12; r.sequence_parallel = true;
  require_error(r, "parallel.sequence_parallel: true needs parallel.tp > 1 (tp is 1)");
  r = base_request(); r.sequence_parallel = true; r.seq_len = 1023;
  require_error(r, "train.seq_len: 1023 is not divisible by parallel.tp 2 (sequence_parallel "
                   "splits the sequence over tp)");
}
