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

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::parallel;
namespace fs = std::filesystem;

namespace {

JobSpec tiny_spec(const std::string& dir) {
  JobSpec s;
  s.source_path = "mpi_resume";
  s.run.device = DeviceKind::cpu;
  s.run.dir = dir;
  s.model.family = Family::llama;
  s.model.n_layer = 2;
  s.model.d_model = 32;
  s.model.n_head = 4;
  s.model.n_kv_head = 2;
  s.model.d_ff = 64;
  s.model.vocab_size = 200;
  s.model.max_seq_len = 16;
  s.model.tie_embeddings = false;
  s.data.train = {{"synthetic.bin", 1.0}};
  s.train.seq_len = 16;
  s.train.micro_batch = 2;
  s.train.global_batch = 8;
  s.train.steps = 6;
  s.train.eval_every = 0;
  s.optimizer.lr = 1e-3;
  s.optimizer.warmup_steps = 1;
  s.parallel.zero = 1;
  return s;
}

TrainerOptions quiet() {
  TrainerOptions o;
  o.synthetic_data = true;
  o.write_run_dir = false;
  o.log = nullptr;
  return o;
}

checkpoint::ShardPosition position(const Mesh& mesh, const JobSpec& spec) {
  const Coords& c = mesh.coords();
  return checkpoint::shard_position(
      {.tp = c.tp, .dp = c.dp, .cp = c.cp, .dp_size = mesh.shape().dp, .zero = spec.parallel.zero});
}

std::vector<double> run_steps(Trainer& t, int first, int last) {
  std::vector<double> out;
  for (int s = first; s <= last; ++s) out.push_back(t.train_step(s).loss);
  return out;
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
      Trainer a(spec, mesh, quiet());
      run_steps(a, 1, 3);
      checkpoint::Checkpointer c(spec, world, Device::cpu, position(mesh, spec));
      c.save(3, a.model().buffers(), a.optimizer());
      uninterrupted = run_steps(a, 4, 6);
    }
    if (rank == 0) {
      // Both dp ranks wrote a shard: rank 1 holds its half of the optimizer state.
      checkpoint::Json meta =
          checkpoint::verify_checkpoint((fs::path(argv[1]) / "checkpoints" / "step_000003").string());
      MPI_TEST_CHECK(meta.at("shards").items().size() == 2, rank);
    }
    {
      Trainer b(spec, mesh, quiet());
      checkpoint::Checkpointer c(spec, world, Device::cpu, position(mesh, spec));
      MPI_TEST_CHECK(c.resume(b.model().buffers(), b.optimizer()) == 3, rank);
      MPI_TEST_CHECK(run_steps(b, 4, 6) == uninterrupted, rank);
    }
    {
      JobSpec s0 = spec;
      s0.parallel.zero = 0;
      Trainer z(s0, mesh, quiet());
      checkpoint::Checkpointer c(s0, world, Device::cpu, position(mesh, s0));
      MPI_TEST_CHECK(c.resume(z.model().buffers(), z.optimizer()) == 3, rank);
      std::vector<double> got = run_steps(z, 4, 6);
      for (size_t i = 0; i < got.size(); ++i)
        MPI_TEST_CHECK(std::fabs(got[i] - uninterrupted[i]) <= 1e-5 * std::fabs(uninterrupted[i]), rank);
      // zero 0: the replicas hold the same state, so only rank 0 writes.
      c.save(6, z.model().buffers(), z.optimizer());
      if (rank == 0) {
        checkpoint::Json meta = checkpoint::verify_checkpoint(c.last_path());
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
