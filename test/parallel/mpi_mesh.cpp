// On 8 ranks: the Mesh's per-axis communicators (tp2 dp2 pp2, and dp8 with
// ep4) hold exactly the ranks group_ranks() computes; then bucketed DP
// averaging and the ZeRO reduce-scatter / all-gather against local sums.
#include <cmath>
#include <cstdio>
#include <vector>

#include "mpi_check.h"
#include "parallel/grad_sync.h"
#include "parallel/mesh.h"

using namespace trainer;
using namespace trainer::parallel;

namespace {

void check_groups(Mesh& mesh) {
  const int me = mesh.rank();
  for (Axis axis : kAllAxes) {
    Communicator& c = mesh.comm(axis);
    const std::vector<int> expected = group_ranks(mesh.shape(), axis, me);
    MPI_TEST_CHECK(c.size() == static_cast<int>(expected.size()), me);
    MPI_TEST_CHECK(c.rank() == mesh.coords().along(axis), me);
    MPI_TEST_CHECK(c.name() == axis_name(axis), me);
    int32_t mine = me;
    std::vector<int32_t> members(c.size(), -1);
    c.all_gather(Tensor(&mine, {1}, DType::i32), Tensor(members.data(), {c.size()}, DType::i32));
    for (int k = 0; k < c.size(); ++k) MPI_TEST_CHECK(members[k] == expected[k], me);
  }
}

// What dp rank r's gradient holds at element i.
float grad(int r, int64_t i) { return 0.5f * static_cast<float>(r) - 0.125f * static_cast<float>(i % 17); }

void check_grad_sync(Mesh& mesh) {
  Communicator& dp = mesh.comm(Axis::dp);
  const int me = mesh.rank(), r = dp.rank(), n = dp.size();
  auto mean = [&](int64_t i) {
    double s = 0;
    for (int q = 0; q < n; ++q) s += grad(q, i);
    return s / n;
  };
  // Bucketed all-reduce: 5 tensors, backward order, 400-byte buckets.
  std::vector<float> arena(700);
  for (int i = 0; i < 700; ++i) arena[i] = grad(r, i);
  GradReducer reducer(dp, Tensor(arena.data(), {700}),
                      {{500, 200}, {450, 50}, {300, 150}, {100, 200}, {0, 100}}, 400);
  MPI_TEST_CHECK(reducer.buckets().size() == 4, me);
  reducer.mark_ready(0);
  reducer.mark_ready(2);
  reducer.mark_ready(1);
  reducer.finish();
  for (int i = 0; i < 700; ++i) MPI_TEST_CHECK(std::abs(arena[i] - mean(i)) <= 1e-6, me);

  // ZeRO-2 reduce-scatter then ZeRO-1/2 all-gather of "updated" shards.
  const ZeroShard shard = zero_shard(1000, n, r, 64);
  std::vector<float> g(shard.padded, 0.0f);
  for (int i = 0; i < 1000; ++i) g[i] = grad(r, i);
  zero_reduce_scatter(dp, Tensor(g.data(), {shard.padded}), shard);
  for (int64_t i = shard.begin; i < std::min<int64_t>(shard.end(), 1000); ++i)
    MPI_TEST_CHECK(std::abs(g[i] - mean(i)) <= 1e-6, me);
  std::vector<float> p(shard.padded, -7.0f);
  for (int64_t i = shard.begin; i < shard.end(); ++i) p[i] = 3.0f * i + r;  // "optimizer step"
  zero_all_gather(dp, Tensor(p.data(), {shard.padded}), shard);
  for (int64_t i = 0; i < shard.padded; ++i)
    MPI_TEST_CHECK(p[i] == 3.0f * i + static_cast<float>(i / shard.shard), me);

  const double total = group_sum(dp, static_cast<double>(r + 1));
  MPI_TEST_CHECK(total == n * (n + 1) / 2.0, me);
}

}  // namespace

int main() {
  return run_mpi_test([] {
    const LaunchEnv env = detect_launch_env();
    MPI_TEST_CHECK(env.world == 8 && env.launcher == "openmpi", env.rank);

    MeshRequest request;
    request.world = env.world;
    request.tp = 2;
    request.pp = 2;
    {
      Mesh mesh(env, resolve_mesh(request), Device::cpu, 30.0);
      MPI_TEST_CHECK(mesh.shape().dp == 2, env.rank);
      check_groups(mesh);
      check_grad_sync(mesh);
    }
    request.tp = 1;
    request.pp = 1;
    request.ep = 4;
    {
      Mesh mesh(env, resolve_mesh(request), Device::cpu, 30.0);
      MPI_TEST_CHECK(mesh.shape().dp == 8 && mesh.shape().edp() == 2, env.rank);
      check_groups(mesh);
      check_grad_sync(mesh);
      mesh.comm(Axis::world).barrier();
      if (mesh.logs()) std::printf("mpi mesh: 8 ranks ok\n");
    }
  });
}
