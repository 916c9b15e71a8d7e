// MeshShape: the sizes of the parallel axes, the one function that validates
// them (resolve_mesh), and the pure rank <-> coordinate arithmetic that every
// communicator split, `trainer plan` and the tests share.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace trainer::parallel {

// tp varies fastest: rank = tp + TP*(cp + CP*(dp + DP*pp)) (Megatron's order).
// ep splits the dp x cp ranks of one pipeline stage into consecutive groups of
// `ep`; edp (expert-data-parallel) joins the ranks holding the same experts;
// dp_cp is the whole dp x cp group of a stage (what non-expert gradients are
// reduced over when cp > 1).
enum class Axis : int { tp, cp, dp, pp, ep, edp, dp_cp, world };
constexpr int kNumAxes = 8;
constexpr std::array<Axis, kNumAxes> kAllAxes = {Axis::tp, Axis::cp, Axis::dp,   Axis::pp,
                                                 Axis::ep, Axis::edp, Axis::dp_cp, Axis::world};
const char* axis_name(Axis axis);

// What the mesh is resolved from: the integrator fills it from the JobSpec and
// the launch environment (parallel/ knows nothing of engine/).
struct MeshRequest {
  int world = 1;
  int tp = 1, pp = 1, cp = 1, ep = 1;
  int dp = 0;                  // 0 = auto: world / (tp * pp * cp)
  int zero = 0;                // 0, 1, 2 or 3
  int virtual_stages = 1;
  bool sequence_parallel = false;
  int n_layer = 0;             // 0 = not checked (each model field below likewise)
  int n_head = 0;
  int n_kv_head = 0;           // 0 = same as n_head
  int n_experts = 0;           // 0 = dense model; checked against ep when ep > 1
  int global_batch = 0;        // sequences per optimizer step, all ranks; 0 = not checked
  int micro_batch = 0;         // sequences per micro-batch per dp rank; 0 = not checked
  int rampup_start = 0;        // train.rampup_batch_size's start and increment; 0 = no ramp
  int rampup_increment = 0;
  int seq_len = 0;             // 0 = not checked
};

struct MeshShape {
  int world = 1;
  int tp = 1, cp = 1, dp = 1, pp = 1, ep = 1;
  int zero = 0;
  int virtual_stages = 1;
  bool sequence_parallel = false;

  int edp() const { return dp * cp / ep; }
  int dp_cp() const { return dp * cp; }
  int size(Axis axis) const;
  std::string str() const;  // "world 8 = tp 2 x cp 1 x dp 2 x pp 2 (ep 1, edp 2)"
};

// This rank's index along every axis (its position inside that axis' group).
struct Coords {
  int rank = 0;
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int ep = 0, edp = 0, dp_cp = 0;
  int along(Axis axis) const;
};

// Validates every mesh rule in one place; throws InputError with one line that
// names the keys and numbers of the first rule broken.
MeshShape resolve_mesh(const MeshRequest& request);

Coords coords_of(const MeshShape& shape, int rank);
int rank_of(const MeshShape& shape, int tp, int cp, int dp, int pp);
// Which group of `axis` the rank belongs to: equal ids = same group; ids run
// 0..world/size(axis)-1. Used as the MPI/NCCL split color.
int group_id(const MeshShape& shape, Axis axis, int rank);
// The members of rank's group along `axis`, ordered by their coordinate on
// that axis (element i is the member with coordinate i).
std::vector<int> group_ranks(const MeshShape& shape, Axis axis, int rank);

}  // namespace trainer::parallel
