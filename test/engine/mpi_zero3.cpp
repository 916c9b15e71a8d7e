// On 4 MPI ranks (dp 4), ZeRO-3 in the trainer: each rank's persistent
// parameters, gradients and AdamW state are 1/dp of the model (up to each
// unit's padding) and the arenas hold only the embedding, the head and one
// block, as allocated; every block is gathered twice per micro-batch (forward,
// backward) and reduce-scattered once, the embedding and head once per step;
// an fp16 overflow on one rank's gathered table skips the update on
// every rank, leaving every shard as it was; and with experts split over ep 2
// (edp 2) each MoE block's routed experts are a part of their own, sharded
// over edp while the rest shards over dp 4, each part gathered on its own.
// Usage: mpirun -np 4 engine_mpi_zero3
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../parallel/mpi_check.h"
#include "engine/mesh_from_spec.h"
#include "engine/trainer.h"
#include "kernels/memory.h"
#include "parallel/launch_env.h"
#include "parallel/mesh.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::parallel;

namespace {

constexpr int kLayers = 4;

JobSpec job(Family family, int zero) {
  JobSpec s = testing::tiny_job(family, 3);
  s.source_path = "mpi_zero3";
  s.model.n_layer = kLayers;
  s.train.micro_batch = 1;
  s.train.global_batch = 8;  // 2 micro-batches per dp rank
  s.parallel.zero = zero;
  return s;
}

std::vector<float> host_copy(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  copy_to_host(out.data(), t);
  return out;
}

void check_memory(Family family, Mesh& mesh) {
  const int rank = mesh.rank(), dp = mesh.shape().dp;
  Trainer z1(job(family, 1), mesh, testing::quiet_options());
  Trainer z3(job(family, 3), mesh, testing::quiet_options());
  const MemoryPlan &a = z1.plan(), &b = z3.plan();
  const int P = static_cast<int>(model::Category::parameters);
  const int G = static_cast<int>(model::Category::gradients);
  const auto& units = z3.model().buffers().param_units();
  // A dp-only mesh: blocks alternate between two regions (zero_double_buffers).
  const int regions = z3.model().buffers().shared_regions();
  MPI_TEST_CHECK(regions == 2, rank);
  size_t padded = 0, whole_step = 0, smallest_block = SIZE_MAX;
  size_t largest_block[2] = {0, 0};  // per region
  for (const auto& u : units) {
    const size_t bytes = static_cast<size_t>(u.padded) * sizeof(float);
    padded += bytes;
    if (!u.shared) whole_step += bytes;
    if (u.shared) largest_block[u.region] = std::max(largest_block[u.region], bytes);
    if (u.shared) smallest_block = std::min(smallest_block, bytes);
  }
  const size_t model_bytes = a.category[P];  // the whole (tp-local) model, zero 1
  // Persistent: 1/dp of the units, each padded to at most dp * 64 elements more.
  MPI_TEST_CHECK(b.param_shards * dp == padded, rank);
  MPI_TEST_CHECK(padded <= model_bytes + units.size() * size_t(dp) * 64 * sizeof(float), rank);
  MPI_TEST_CHECK(b.grad_shards == b.param_shards && b.optimizer == 2 * b.param_shards, rank);
  MPI_TEST_CHECK(b.optimizer <= a.optimizer + units.size() * 2 * 64 * sizeof(float), rank);
  // Gathered: the embedding, the head and two blocks (one per region), not kLayers blocks.
  MPI_TEST_CHECK(b.category[P] == whole_step + largest_block[0] + largest_block[1] &&
                     b.category[G] == b.category[P], rank);
  MPI_TEST_CHECK(b.category[P] + (kLayers - regions) * smallest_block <=
                     model_bytes + units.size() * 64 * dp * 4, rank);
  MPI_TEST_CHECK(z3.allocated_bytes() == b.total(), rank);
  if (rank == 0)
    std::printf("%s: zero 1 holds %zu B of parameters + %zu B of gradients + %zu B of state; zero 3 %zu + %zu "
                "B of shards, %zu + %zu B gathered, %zu B of state\n",
                family == Family::gpt2 ? "gpt2" : "llama", a.category[P], a.category[G], a.optimizer,
                b.param_shards, b.grad_shards, b.category[P], b.category[G], b.optimizer);

  // Collectives per step: each block gathered for forward and backward of
  // each micro-batch, except where it is still in its region (two regions:
  // the last two blocks at each turn from forward to backward, the first two
  // at the turn to the next micro-batch), reduce-scattered after each
  // backward; the embedding and head (non-empty units) once each per step.
  const ShardedParams* sp = z3.sharded_params();
  MPI_TEST_CHECK(sp != nullptr && z1.sharded_params() == nullptr, rank);
  int whole = 0;
  for (const auto& u : units) whole += !u.shared && u.param_end > u.param_begin;
  const int64_t g0 = sp->gathers(), r0 = sp->reduce_scatters();
  z3.train_step(1);
  const int micro = 2;
  const int turns = micro + (micro - 1);
  MPI_TEST_CHECK(sp->gathers() - g0 == 2 * kLayers * micro - 2 * turns + whole, rank);
  MPI_TEST_CHECK(sp->reduce_scatters() - r0 == kLayers * micro + whole, rank);
}

void check_fp16_overflow(Mesh& mesh) {
  const int rank = mesh.rank();
  JobSpec spec = job(Family::gpt2, 3);
  spec.precision.compute = ComputeDtype::fp16;
  Trainer t(spec, mesh, testing::quiet_options());
  StepRecord r1 = t.train_step(1);
  MPI_TEST_CHECK(!r1.skipped && r1.loss_scale == 65536.0, rank);
  // Rank 0's gathered token table gets one entry beyond fp16's range: only
  // its forward is non-finite, yet every rank must skip.
  const model::Buffers& b = t.model().buffers();
  float* w = nullptr;
  for (const auto& p : b.params())
    if (p.spec.name == "transformer.wte.weight") w = static_cast<float*>(b.get(p.value).data);
  MPI_TEST_CHECK(w != nullptr, rank);
  const float saved = w[5];
  if (rank == 0) {
    w[5] = 1e6f;
    t.model().refresh_compute_weights(t.context());
  }
  const std::vector<float> before = host_copy(t.optimizer().param_shards());
  StepRecord r2 = t.train_step(2);
  MPI_TEST_CHECK(r2.skipped && std::isnan(r2.grad_norm), rank);
  const std::vector<float> after = host_copy(t.optimizer().param_shards());
  MPI_TEST_CHECK(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0, rank);
  if (rank == 0) {
    w[5] = saved;
    t.model().refresh_compute_weights(t.context());
  }
  StepRecord r3 = t.train_step(3);
  MPI_TEST_CHECK(!r3.skipped && r3.loss_scale == 32768.0 && std::isfinite(r3.grad_norm), rank);
  if (rank == 0) std::printf("fp16: an overflow on rank 0 skipped the step on every rank\n");
}

void check_experts_apart(const LaunchEnv& env) {
  JobSpec spec = job(Family::llama, 3);
  spec.model.moe.enabled = true;
  spec.model.moe.n_experts = 4;
  spec.model.moe.d_ff_expert = 32;
  spec.model.moe.n_shared_experts = 1;  // dense again after the routed experts
  spec.model.moe.every = 2;             // MoE in layers 1 and 3
  spec.parallel.ep = 2;
  Mesh mesh(env, resolve_job_mesh(spec, env.world), Device::cpu, 60.0);
  const int rank = mesh.rank(), dp = mesh.shape().dp, edp = mesh.shape().edp();
  MPI_TEST_CHECK(dp == 4 && edp == 2, rank);
  Trainer z3(spec, mesh, testing::quiet_options());
  const model::Buffers& b = z3.model().buffers();
  const ZeroLayout& z = z3.optimizer().layout();
  int64_t shard = 0, expert_shard = 0, moe_blocks = 0, parts_gathered_per_step = 0, whole = 0;
  int64_t first_block_parts = -1, last_block_parts = -1;
  for (int u = 0; u < static_cast<int>(b.param_units().size()); ++u) {
    const auto& unit = b.param_units()[u];
    int64_t covered = 0;
    bool moe = false;
    for (const auto& part : unit.parts) {
      MPI_TEST_CHECK(part.first == unit.first + covered && part.padded % (dp * 64) == 0, rank);
      covered += part.padded;
      for (int i = part.param_begin; i < part.param_end; ++i)
        MPI_TEST_CHECK(b.params()[i].spec.expert == part.expert, rank);
      shard += part.padded / (part.expert ? edp : dp);
      if (part.expert) expert_shard += part.padded / edp;
      moe = moe || part.expert;
    }
    MPI_TEST_CHECK(covered == unit.padded && z.unit_parts(u).size() == unit.parts.size(), rank);
    // A MoE block: attention, norms, router and shared expert | routed experts.
    if (moe) MPI_TEST_CHECK(unit.parts.size() == 2 && unit.parts[1].expert, rank);
    moe_blocks += moe;
    const int n = static_cast<int>(unit.parts.size());
    if (unit.shared) parts_gathered_per_step += n;
    if (unit.shared && first_block_parts < 0) first_block_parts = n;
    if (unit.shared) last_block_parts = n;
    else if (unit.param_end > unit.param_begin) whole += n;
  }
  MPI_TEST_CHECK(moe_blocks == kLayers / 2 && expert_shard > 0, rank);
  MPI_TEST_CHECK(z.state_elems == shard, rank);
  MPI_TEST_CHECK(z3.plan().param_shards == size_t(shard) * sizeof(float), rank);
  MPI_TEST_CHECK(z3.allocated_bytes() == z3.plan().total(), rank);
  const ShardedParams* sp = z3.sharded_params();
  const int64_t g0 = sp->gathers(), r0 = sp->reduce_scatters();
  StepRecord r3 = z3.train_step(1);
  const int micro = 2;
  // One region (ep 2): the block still there is not gathered again, the
  // last one at each turn from forward to backward, the first one at the
  // turn to the next micro-batch.
  MPI_TEST_CHECK(b.shared_regions() == 1 && last_block_parts == 2 && first_block_parts == 1, rank);
  MPI_TEST_CHECK(sp->gathers() - g0 == 2 * parts_gathered_per_step * micro - micro * last_block_parts -
                                           (micro - 1) * first_block_parts + whole,
                 rank);
  MPI_TEST_CHECK(sp->reduce_scatters() - r0 == parts_gathered_per_step * micro + whole, rank);
  // The same step as zero 1 (experts' state over edp, by part): loss and gradient norm.
  spec.parallel.zero = 1;
  Trainer z1(spec, mesh, testing::quiet_options());
  // Zero 1 shards the optimizer by the same parts: exactly zero 3's state.
  MPI_TEST_CHECK(z1.optimizer().layout().by_unit_parts() &&
                     z1.optimizer().layout().state_elems == z.state_elems,
                 rank);
  MPI_TEST_CHECK(z1.allocated_bytes() == z1.plan().total(), rank);
  StepRecord r1 = z1.train_step(1);
  MPI_TEST_CHECK(std::abs(r3.loss - r1.loss) <= 1e-6 * r1.loss, rank);
  MPI_TEST_CHECK(std::abs(r3.grad_norm - r1.grad_norm) <= 1e-6 * r1.grad_norm, rank);
  if (rank == 0)
    std::printf("ep 2 x edp 2: %lld of %lld shard elements routed experts (over edp), the rest over "
                "dp; step 1 loss %.9g, grad norm %.9g as zero 1\n",
                static_cast<long long>(expert_shard), static_cast<long long>(shard), r3.loss,
                r3.grad_norm);
}

}  // namespace

int main() {
  return run_mpi_test([&] {
    const LaunchEnv env = detect_launch_env();
    MPI_TEST_CHECK(env.world == 4, env.rank);
    JobSpec spec = job(Family::gpt2, 3);
    Mesh mesh(env, resolve_job_mesh(spec, env.world), Device::cpu, 60.0);
    check_memory(Family::gpt2, mesh);
    check_memory(Family::llama, mesh);
    check_fp16_overflow(mesh);
    check_experts_apart(env);
  });
}
