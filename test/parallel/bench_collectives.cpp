// Gradient-sync cost on CPU ranks: bucketed all-reduce (zero 0/1) and
// reduce-scatter + all-gather (zero 2) of an N-million-parameter fp32 arena.
// Usage: mpirun -np 2 parallel_bench_collectives [millions=124] [bucket_mb=25] [reps=3]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mpi_check.h"
#include "parallel/grad_sync.h"
#include "parallel/mesh.h"

using namespace trainer;
using namespace trainer::parallel;

int main(int argc, char** argv) {
  return run_mpi_test([&] {
    const int64_t numel = static_cast<int64_t>((argc > 1 ? std::atof(argv[1]) : 124.0) * 1e6);
    const int64_t bucket_bytes = static_cast<int64_t>((argc > 2 ? std::atof(argv[2]) : 25.0) * (1 << 20));
    const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
    const LaunchEnv env = detect_launch_env();
    Mesh mesh(env, resolve_mesh({.world = env.world}), Device::cpu, 600.0);
    Communicator& dp = mesh.comm(Axis::dp);
    const ZeroShard shard = zero_shard(numel, dp.size(), dp.rank());
    std::vector<float> arena(shard.padded, 1.0f);
    // 1M-element tensors, like a model's layers, in backward order.
    std::vector<GradRange> ranges;
    for (int64_t off = 0; off < shard.padded; off += 1 << 20)
      ranges.push_back({off, std::min<int64_t>(1 << 20, shard.padded - off)});
    std::vector<GradRange> backward(ranges.rbegin(), ranges.rend());
    GradReducer reducer(dp, Tensor(arena.data(), {shard.padded}), backward, bucket_bytes);
    auto time = [&](auto&& body) {
      body();  // warm-up
      dp.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) body();
      dp.barrier();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    };
    const double t_ar = time([&] { reducer.reduce_all(); });
    const double t_rs = time([&] { zero_reduce_scatter(dp, Tensor(arena.data(), {shard.padded}), shard); });
    std::vector<float> recv(shard.shard);
    const double t_rs_out = time([&] {
      dp.reduce_scatter(Tensor(arena.data(), {shard.padded}), Tensor(recv.data(), {shard.shard}),
                        ReduceOp::avg);
    });
    const double t_ag = time([&] { zero_all_gather(dp, Tensor(arena.data(), {shard.padded}), shard); });
    if (mesh.logs()) {
      std::printf("dp %d, %.1fM fp32 (%.0f MB), %zu buckets of %.0f MB: bucketed all_reduce %.3f s, "
                  "reduce_scatter %.3f s (out of place %.3f s), all_gather %.3f s\n",
                  dp.size(), numel / 1e6, numel * 4.0 / (1 << 20), reducer.buckets().size(),
                  bucket_bytes / double(1 << 20), t_ar, t_rs, t_rs_out, t_ag);
    }
  });
}
