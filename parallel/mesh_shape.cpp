// Mesh validation and rank arithmetic (see mesh_shape.h).
#include "parallel/mesh_shape.h"

#include <fmt/format.h>

#include "kernels/error.h"

namespace trainer::parallel {

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::tp: return "tp";
    case Axis::cp: return "cp";
    case Axis::dp: return "dp";
    case Axis::pp: return "pp";
    case Axis::ep: return "ep";
    case Axis::edp: return "edp";
    case Axis::dp_cp: return "dp_cp";
    case Axis::world: return "world";
  }
  return "?";
}

int MeshShape::size(Axis axis) const {
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::cp: return cp;
    case Axis::dp: return dp;
    case Axis::pp: return pp;
    case Axis::ep: return ep;
    case Axis::edp: return edp();
    case Axis::dp_cp: return dp_cp();
    case Axis::world: return world;
  }
  return 0;
}

std::string MeshShape::str() const {
  return fmt::format("world {} = tp {} x cp {} x dp {} x pp {} (ep {}, edp {}, zero {}{})", world,
                     tp, cp, dp, pp, ep, edp(), zero,
                     sequence_parallel ? ", sequence parallel" : "");
}

int Coords::along(Axis axis) const {
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::cp: return cp;
    case Axis::dp: return dp;
    case Axis::pp: return pp;
    case Axis::ep: return ep;
    case Axis::edp: return edp;
    case Axis::dp_cp: return dp_cp;
    case Axis::world: return rank;
  }
  return 0;
}

MeshShape resolve_mesh(const MeshRequest& r) {
  TRAINER_INPUT_CHECK(r.world >= 1, "parallel: world size {} must be at least 1", r.world);
  TRAINER_INPUT_CHECK(r.tp >= 1, "parallel.tp: {} must be at least 1", r.tp);
  TRAINER_INPUT_CHECK(r.pp >= 1, "parallel.pp: {} must be at least 1", r.pp);
  TRAINER_INPUT_CHECK(r.cp >= 1, "parallel.cp: {} must be at least 1", r.cp);
  TRAINER_INPUT_CHECK(r.ep >= 1, "parallel.ep: {} must be at least 1", r.ep);
  TRAINER_INPUT_CHECK(r.dp >= 0, "parallel.dp: {} must be auto or at least 1", r.dp);
  TRAINER_INPUT_CHECK(r.virtual_stages >= 1, "parallel.virtual_stages: {} must be at least 1",
                      r.virtual_stages);
  TRAINER_INPUT_CHECK(r.zero >= 0 && r.zero <= 3, "parallel.zero: {} is not valid (0, 1, 2 or 3)",
                      r.zero);

  const long model_ranks = static_cast<long>(r.tp) * r.pp * r.cp;
  TRAINER_INPUT_CHECK(r.world % model_ranks == 0,
                      "parallel: world {} is not divisible by tp {} * pp {} * cp {} = {}", r.world,
                      r.tp, r.pp, r.cp, model_ranks);
  const int auto_dp = static_cast<int>(r.world / model_ranks);
  TRAINER_INPUT_CHECK(r.dp == 0 || r.dp == auto_dp,
                      "parallel.dp: {} but world {} / (tp {} * pp {} * cp {}) = {}", r.dp, r.world,
                      r.tp, r.pp, r.cp, auto_dp);
  const int dp = auto_dp;
  TRAINER_INPUT_CHECK((dp * r.cp) % r.ep == 0,
                      "parallel.ep: {} does not divide dp {} * cp {} = {}", r.ep, dp, r.cp,
                      dp * r.cp);
  if (r.ep > 1) {
    TRAINER_INPUT_CHECK(r.n_experts > 0 || r.n_layer == 0,
                        "parallel.ep: {} needs a model with experts (model.moe)", r.ep);
    TRAINER_INPUT_CHECK(r.n_experts == 0 || r.n_experts % r.ep == 0,
                        "model.moe.n_experts: {} is not divisible by parallel.ep {}", r.n_experts,
                        r.ep);
  }

  if (r.n_head > 0) {
    TRAINER_INPUT_CHECK(r.n_head % r.tp == 0, "model.n_head: {} is not divisible by parallel.tp {}",
                        r.n_head, r.tp);
    const int kv = r.n_kv_head > 0 ? r.n_kv_head : r.n_head;
    // Fewer KV heads than tp ranks: each KV head is replicated on tp / kv ranks,
    // which needs an exact multiple.
    if (kv >= r.tp) {
      TRAINER_INPUT_CHECK(kv % r.tp == 0, "model.n_kv_head: {} is not divisible by parallel.tp {}",
                          kv, r.tp);
    } else {
      TRAINER_INPUT_CHECK(r.tp % kv == 0,
                          "model.n_kv_head: {} is below parallel.tp {} and does not divide it "
                          "(KV heads are replicated over tp / n_kv_head ranks)",
                          kv, r.tp);
    }
  }
  TRAINER_INPUT_CHECK(r.virtual_stages == 1 || r.pp > 1,
                      "parallel.virtual_stages: {} needs parallel.pp > 1", r.virtual_stages);
  if (r.n_layer > 0) {
    TRAINER_INPUT_CHECK(r.n_layer % (r.pp * r.virtual_stages) == 0,
                        "model.n_layer: {} is not divisible by parallel.pp {} * "
                        "parallel.virtual_stages {} = {}",
                        r.n_layer, r.pp, r.virtual_stages, r.pp * r.virtual_stages);
  }
  if (r.global_batch > 0 && r.micro_batch > 0) {
    TRAINER_INPUT_CHECK(r.global_batch % (static_cast<long>(r.micro_batch) * dp) == 0,
                        "train.global_batch: {} is not divisible by train.micro_batch {} * dp {} "
                        "= {}",
                        r.global_batch, r.micro_batch, dp, static_cast<long>(r.micro_batch) * dp);
    // Megatron's interleaved schedule runs micro-batches in groups of pp.
    const long micro_batches = r.global_batch / (static_cast<long>(r.micro_batch) * dp);
    TRAINER_INPUT_CHECK(r.virtual_stages == 1 || micro_batches % r.pp == 0,
                        "train.global_batch: {} gives {} micro-batches per step (global_batch / "
                        "(micro_batch {} * dp {})); the interleaved pipeline schedule "
                        "(parallel.virtual_stages {}) needs a multiple of parallel.pp {}",
                        r.global_batch, micro_batches, r.micro_batch, dp, r.virtual_stages, r.pp);
    // Every batch of the ramp is start + k * increment, so both decide them all.
    if (r.rampup_start > 0) {
      const long per_step = static_cast<long>(r.micro_batch) * dp;
      const long group = r.virtual_stages > 1 ? per_step * r.pp : per_step;
      TRAINER_INPUT_CHECK(r.rampup_start % group == 0 && r.rampup_increment % group == 0,
                          "train.rampup_batch_size: start {} and increment {} must be multiples of "
                          "train.micro_batch {} * dp {}{} = {}, so each step of the ramp has whole "
                          "micro-batches{}",
                          r.rampup_start, r.rampup_increment, r.micro_batch, dp,
                          r.virtual_stages > 1 ? fmt::format(" * parallel.pp {}", r.pp) : "", group,
                          r.virtual_stages > 1 ? " in groups of pp (the interleaved schedule)" : "");
    }
  }
  // Sequence parallelism shards activations over the tp group; with tp 1 it
  // would silently do nothing, so the job is refused rather than misread.
  TRAINER_INPUT_CHECK(!r.sequence_parallel || r.tp > 1,
                      "parallel.sequence_parallel: true needs parallel.tp > 1 (tp is {})", r.tp);
  // Context parallelism: each sequence in 2 * cp chunks, two per cp rank
  // (parallel/cp_layout.h).
  if (r.cp > 1 && r.seq_len > 0) {
    TRAINER_INPUT_CHECK(r.seq_len % (2 * r.cp) == 0,
                        "train.seq_len: {} is not divisible by 2 * parallel.cp = {} (context "
                        "parallelism splits each sequence into 2 * cp chunks)",
                        r.seq_len, 2 * r.cp);
  }
  if (r.sequence_parallel && r.seq_len > 0 && r.cp == 1) {
    TRAINER_INPUT_CHECK(r.seq_len % r.tp == 0,
                        "train.seq_len: {} is not divisible by parallel.tp {} (sequence_parallel "
                        "splits the sequence over tp)",
                        r.seq_len, r.tp);
  }
  if (r.sequence_parallel && r.seq_len > 0 && r.cp > 1 && r.seq_len % (2 * r.cp) == 0) {
    TRAINER_INPUT_CHECK((r.seq_len / r.cp) % r.tp == 0,
                        "train.seq_len: {} / parallel.cp {} = {} tokens per rank are not divisible "
                        "by parallel.tp {} (sequence_parallel splits a rank's tokens over tp)",
                        r.seq_len, r.cp, r.seq_len / r.cp, r.tp);
  }

  MeshShape s;
  s.world = r.world;
  s.tp = r.tp;
  s.cp = r.cp;
  s.dp = dp;
  s.pp = r.pp;
  s.ep = r.ep;
  s.zero = r.zero;
  s.virtual_stages = r.virtual_stages;
  s.sequence_parallel = r.sequence_parallel;
  return s;
}

Coords coords_of(const MeshShape& s, int rank) {
  TRAINER_CHECK(rank >= 0 && rank < s.world, "rank {} outside world {}", rank, s.world);
  Coords c;
  c.rank = rank;
  c.tp = rank % s.tp;
  c.cp = (rank / s.tp) % s.cp;
  c.dp = (rank / (s.tp * s.cp)) % s.dp;
  c.pp = rank / (s.tp * s.cp * s.dp);
  c.dp_cp = c.cp + s.cp * c.dp;
  c.ep = c.dp_cp % s.ep;
  c.edp = c.dp_cp / s.ep;
  return c;
}

int rank_of(const MeshShape& s, int tp, int cp, int dp, int pp) {
  return tp + s.tp * (cp + s.cp * (dp + s.dp * pp));
}

int group_id(const MeshShape& s, Axis axis, int rank) {
  const Coords c = coords_of(s, rank);
  const int stage = c.tp + s.tp * c.pp;  // one dp x cp group per (tp, pp)
  switch (axis) {
    case Axis::tp: return rank / s.tp;
    case Axis::cp: return c.tp + s.tp * (c.dp + s.dp * c.pp);
    case Axis::dp: return c.tp + s.tp * (c.cp + s.cp * c.pp);
    case Axis::pp: return rank % (s.tp * s.cp * s.dp);
    case Axis::dp_cp: return stage;
    case Axis::ep: return stage * (s.dp_cp() / s.ep) + c.dp_cp / s.ep;
    case Axis::edp: return stage * s.ep + c.dp_cp % s.ep;
    case Axis::world: return 0;
  }
  return 0;
}

std::vector<int> group_ranks(const MeshShape& s, Axis axis, int rank) {
  const Coords c = coords_of(s, rank);
  const int n = s.size(axis);
  std::vector<int> ranks(n);
  for (int k = 0; k < n; ++k) {
    Coords m = c;
    switch (axis) {
      case Axis::tp: m.tp = k; break;
      case Axis::cp: m.cp = k; break;
      case Axis::dp: m.dp = k; break;
      case Axis::pp: m.pp = k; break;
      case Axis::world: ranks[k] = k; continue;
      case Axis::dp_cp:
      case Axis::ep:
      case Axis::edp: {
        int i = k;  // the member's dp_cp index
        if (axis == Axis::ep) i = (c.dp_cp / s.ep) * s.ep + k;
        if (axis == Axis::edp) i = k * s.ep + c.dp_cp % s.ep;
        m.cp = i % s.cp;
        m.dp = i / s.cp;
        break;
      }
    }
    ranks[k] = rank_of(s, m.tp, m.cp, m.dp, m.pp);
  }
  return ranks;
}

}  // namespace trainer::parallel
