// On 2 MPI ranks (dp 2): a ZeRO-1 run saved at step 3 and resumed continues
// with bit-identical losses; the same checkpoint resumed with zero 0 (each
// rank assembling the whole optimizer state from both shards) continues
// within float tolerance. Usage: mpirun -np 2 checkpoint_mpi_resume DIR
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "../parallel/mpi_check.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/mesh_from_spec.h"
#include "engine/trainer.h"
#include "parallel/launch_env.h"
#include "parallel/mesh.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::parallel;
using testing::quiet_options;
using testing::train_losses;
namespace fs = std::filesystem;

namespace {

// Llama on dp 2: global batch 8 keeps the per-rank batch of the tiny job.
JobSpec tiny_spec(const std::string& dir) {
  JobSpec s = testing::tiny_job(Family::llama, 6);
  s.source_path = "mpi_resume";
  s.run.dir = dir;
  s.train.global_batch = 8;
  s.optimizer.warmup_steps = 1;
  s.parallel.zero = 1;
  return s;
}

checkpoint::ShardPosition position(const Mesh& mesh, const JobSpec& spec) {
  const Coords& c = mesh.coords();
  return checkpoint::shard_position(
      {.tp = c.tp, .dp = c.dp, .cp = c.cp, .dp_size = mesh.shape().dp, .zero = spec.parallel.zero});
}

}  // namespace

int main(int argc, char** argv) {
  return run_mpi_test([&] {
    const LaunchEnv env = detect_launch_env();
    MPI_TEST_CHECK(argc == 2 && env.world == 2, env.rank);
    JobSpec spec = tiny_spec(argv[1]);
    Mesh mesh(env, resolve_job_mesh(spec, env.world), Device::cpu, 60.0);
    Communicator& world = mesh.comm(Axis::world);
    const int rank = mesh.rank();
    if (rank == 0) fs::remove_all(argv[1]);
    world.barrier();

    std::vector<double> uninterrupted;
    {
      Trainer a(spec, mesh, quiet_options());
      train_losses(a, 1, 3);
      checkpoint::Checkpointer c(spec, world, Device::cpu, position(mesh, spec));
      c.save(3, a.model().buffers(), a.optimizer());
      uninterrupted = train_losses(a, 4, 6);
    }
    if (rank == 0) {
      // Both dp ranks wrote a shard: rank 1 holds its half of the optimizer state.
      Json meta =
          checkpoint::verify_checkpoint((fs::path(argv[1]) / "checkpoints" / "step_000003").string());
      MPI_TEST_CHECK(meta.at("shards").items().size() == 2, rank);
    }
    {
      Trainer b(spec, mesh, quiet_options());
      checkpoint::Checkpointer c(spec, world, Device::cpu, position(mesh, spec));
      MPI_TEST_CHECK(c.resume(b.model().buffers(), b.optimizer()) == 3, rank);
      MPI_TEST_CHECK(train_losses(b, 4, 6) == uninterrupted, rank);
    }
    {
      JobSpec s0 = spec;
      s0.parallel.zero = 0;
      Trainer z(s0, mesh, quiet_options());
      checkpoint::Checkpointer c(s0, world, Device::cpu, position(mesh, s0));
      MPI_TEST_CHECK(c.resume(z.model().buffers(), z.optimizer()) == 3, rank);
      std::vector<double> got = train_losses(z, 4, 6);
      for (size_t i = 0; i < got.size(); ++i)
        MPI_TEST_CHECK(std::fabs(got[i] - uninterrupted[i]) <= 1e-5 * std::fabs(uninterrupted[i]), rank);
      // zero 0: the replicas hold the same state, so only rank 0 writes.
      c.save(6, z.model().buffers(), z.optimizer());
      if (rank == 0) {
        Json meta = checkpoint::verify_checkpoint(c.last_path());
        MPI_TEST_CHECK(meta.at("shards").items().size() == 1, rank);
      }
    }
    world.barrier();
    if (rank == 0) {
      fs::remove_all(argv[1]);
      std::printf("checkpoint mpi resume: 2 ranks ok\n");
    }
  });
}
