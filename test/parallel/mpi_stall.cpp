// Watchdog test program: one rank (TRAINER_TEST_STALL_RANK, read only here)
// never joins an all_reduce; the others must report it and end the job.
// Usage: parallel_mpi_stall TIMEOUT_S [init]  (init: the rank stalls before
// the mesh exists, so the others wait in its construction)
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "mpi_check.h"
#include "parallel/mesh.h"

using namespace trainer;
using namespace trainer::parallel;

int main(int argc, char** argv) {
  return run_mpi_test([&] {
    const auto [timeout_s, stall_rank] = stall_test(argc, argv);
    const LaunchEnv env = detect_launch_env();
    const bool at_init = argc > 2 && std::string(argv[2]) == "init";
    if (at_init && env.rank == stall_rank) std::this_thread::sleep_for(std::chrono::seconds(120));
    Mesh mesh(env, resolve_mesh({.world = env.world}), Device::cpu, timeout_s);
    std::vector<float> x(16, 1.0f);
    mesh.comm(Axis::dp).all_reduce(Tensor(x.data(), {16}), ReduceOp::sum);  // all join this one
    if (env.rank == stall_rank) {
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } else {
      mesh.comm(Axis::dp).all_reduce(Tensor(x.data(), {16}), ReduceOp::sum);
    }
    std::printf("rank %d finished without the watchdog\n", env.rank);
  });
}
