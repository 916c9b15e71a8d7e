// On 2 MPI ranks (dp 2): a ZeRO-1 run saved at step 3 and resumed continues
// with bit-identical losses; the same checkpoint resumed with zero 0 (each
// rank assembling the whole optimizer state from both shards) continues
// within float tolerance. A background save (checkpoint.async) writes the same
// shards, completed once both ranks' are written; a shard rank 1 cannot write
// ends the save on both ranks with an Error (rank 0's names rank 1), none
// waiting on the other, and leaves the previous checkpoint as latest.
// Usage: mpirun -np 2 checkpoint_mpi_resume DIR
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "../parallel/mpi_check.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/mesh_from_spec.h"
#include "engine/trainer.h"
#include "parallel/launch_env.h"
#include "parallel/mesh.h"
#include "test/checkpoint/checkpoint_helpers.h"
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

// Rank `failing` cannot grow files past 512 bytes during `save`; returns
// this rank's Error message ("" when none was thrown).
std::string save_failing_on(int rank, int failing, const std::function<void()>& save) {
  std::optional<testing::FileSizeLimit> full;
  if (rank == failing) full.emplace(512);
  try {
    save();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
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
    {
      // Background saves: the same shards as step 3's foreground save.
      JobSpec sa = spec;
      sa.checkpoint.dir = (fs::path(argv[1]) / "async").string();
      Trainer a(sa, mesh, quiet_options());
      train_losses(a, 1, 3);
      checkpoint::Checkpointer c(sa, world, Device::cpu, position(mesh, sa));
      c.save(3, a.model().buffers(), a.optimizer(), {}, /*background=*/true);
      MPI_TEST_CHECK(c.in_flight(), rank);
      train_losses(a, 4, 4);  // training goes on meanwhile
      std::string done;
      for (int i = 0; i < 2000 && done.empty(); ++i) {
        done = c.poll();  // collective: both ranks poll at each "step"
        if (done.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      MPI_TEST_CHECK(done == (fs::path(sa.checkpoint.dir) / "step_000003").string(), rank);
      if (rank == 0) {
        checkpoint::verify_checkpoint(done);
        for (int r = 0; r < 2; ++r) {
          const std::string shard = checkpoint::shard_file_name(r);
          MPI_TEST_CHECK(testing::read_all(fs::path(done) / shard) ==
                             testing::read_all(fs::path(argv[1]) / "checkpoints" / "step_000003" / shard),
                         rank);
        }
      }
      // Rank 1 cannot write its shard: both ranks end the save with an Error.
      for (bool background : {true, false}) {
        const std::string what = save_failing_on(rank, 1, [&] {
          c.save(4, a.model().buffers(), a.optimizer(), {}, background);
          c.finish();
        });
        MPI_TEST_CHECK(what.find("checkpoint step_000004") != std::string::npos, rank);
        MPI_TEST_CHECK(what.find(rank == 0 ? "rank 1 could not write its shard" : "File too large") !=
                           std::string::npos, rank);
        MPI_TEST_CHECK(what.find("the last good one is " + done) != std::string::npos, rank);
        MPI_TEST_CHECK(!c.in_flight(), rank);
        world.barrier();
        if (rank == 0) {
          MPI_TEST_CHECK(!fs::exists(fs::path(sa.checkpoint.dir) / "step_000004"), rank);
          MPI_TEST_CHECK(checkpoint::find_latest_good(sa.checkpoint.dir, nullptr) == done, rank);
        }
      }
    }
    world.barrier();
    if (rank == 0) {
      fs::remove_all(argv[1]);
      std::printf("checkpoint mpi resume and async save: 2 ranks ok\n");
    }
  });
}
