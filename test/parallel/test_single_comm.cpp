// Single-rank communicator semantics, bucket planning, ZeRO shard layout,
// the watchdog (in a forked child) and the TCP rendezvous (threads).
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <numeric>
#include <thread>

#include "kernels/error.h"
#include "parallel/communicator.h"
#include "parallel/grad_sync.h"
#include "parallel/mesh.h"
#include "parallel/tcp_rendezvous.h"
#include "parallel/watchdog.h"

using namespace trainer;
using namespace trainer::parallel;

TEST_CASE("single-rank communicator is the identity", "[cpu]") {
  auto comm = make_single_communicator("dp");
  REQUIRE((comm->rank() == 0 && comm->size() == 1 && comm->name() == "dp"));
  std::vector<float> a = {1.5f, -2.0f, 3.25f};
  const std::vector<float> original = a;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    comm->all_reduce(Tensor(a.data(), {3}), op);
    REQUIRE(a == original);
  }
  std::vector<float> out(3, 0.0f);
  comm->reduce_scatter(Tensor(a.data(), {3}), Tensor(out.data(), {3}), ReduceOp::avg);
  REQUIRE(out == original);
  std::fill(out.begin(), out.end(), 0.0f);
  comm->all_gather(Tensor(a.data(), {3}), Tensor(out.data(), {3}));
  REQUIRE(out == original);
  comm->all_gather(Tensor(a.data(), {3}), Tensor(a.data(), {3}));  // in place
  REQUIRE(a == original);
  comm->broadcast(Tensor(a.data(), {3}), 0);
  REQUIRE(a == original);
  const int64_t counts[1] = {3};
  std::fill(out.begin(), out.end(), 0.0f);
  comm->all_to_allv(Tensor(a.data(), {3}), counts, Tensor(out.data(), {3}), counts);
  REQUIRE(out == original);
  comm->barrier();
  comm->synchronize();
  REQUIRE_THROWS_AS(comm->send(Tensor(a.data(), {3}), 0), Error);
  REQUIRE_THROWS_AS(comm->broadcast(Tensor(a.data(), {3}), 1), Error);
  REQUIRE_THROWS_AS(comm->all_gather(Tensor(a.data(), {3}), Tensor(out.data(), {2})), Error);
}

TEST_CASE("gradient buckets group whole tensors in the order given", "[cpu]") {
  // Arena in forward order: t0 [0,100) t1 [100,400) t2 [400,450) t3 [450,1000).
  // Backward order: t3, t2, t1, t0. Bucket of 1000 bytes = 250 fp32.
  const std::vector<GradRange> grads = {{450, 550}, {400, 50}, {100, 300}, {0, 100}};
  const auto buckets = plan_buckets(grads, 1000);
  REQUIRE(buckets.size() == 3);
  REQUIRE((buckets[0].begin == 450 && buckets[0].end == 1000));
  REQUIRE(buckets[0].tensors == std::vector<int>{0});
  REQUIRE((buckets[1].begin == 100 && buckets[1].end == 450));
  REQUIRE(buckets[1].tensors == std::vector<int>{1, 2});
  REQUIRE((buckets[2].begin == 0 && buckets[2].end == 100));
  // Non-adjacent tensors in one bucket would cover another bucket's range.
  const std::vector<GradRange> interleaved = {{0, 10}, {20, 10}, {10, 10}};
  REQUIRE_THROWS_AS(plan_buckets(interleaved, 80), Error);
}

TEST_CASE("grad reducer on one rank reduces every bucket once", "[cpu]") {
  auto comm = make_single_communicator("dp");
  std::vector<float> arena(1000);
  std::iota(arena.begin(), arena.end(), 0.0f);
  const std::vector<float> original = arena;
  GradReducer reducer(*comm, Tensor(arena.data(), {1000}),
                      {{450, 550}, {400, 50}, {100, 300}, {0, 100}}, 1000);
  int hooks = 0;
  reducer.set_before_reduce([&] { ++hooks; });
  reducer.mark_ready(0);
  REQUIRE(hooks == 1);  // bucket 0 = tensor 0 alone: reduced at once
  reducer.mark_ready(1);
  REQUIRE(hooks == 1);  // bucket 1 still waits for tensor 2
  REQUIRE_THROWS_AS(reducer.mark_ready(1), Error);
  reducer.finish();
  REQUIRE(hooks == 3);
  REQUIRE(arena == original);
  reducer.mark_ready(1);  // re-armed after finish
  reducer.finish();
}

TEST_CASE("zero shard layout pads to dp * alignment", "[cpu]") {
  const ZeroShard s = zero_shard(1000, 3, 2, 64);
  REQUIRE(s.padded == 1152);  // 6 * 192 >= 1000
  REQUIRE(s.shard == 384);
  REQUIRE(s.begin == 768);
  REQUIRE(s.end() == 1152);
  REQUIRE(zero_shard(0, 4, 0).padded == 0);
  REQUIRE(zero_shard(256, 4, 3, 64).padded == 256);
  auto comm = make_single_communicator("dp");
  const ZeroShard one = zero_shard(10, 1, 0, 4);
  std::vector<float> arena(one.padded, 2.0f);
  zero_reduce_scatter(*comm, Tensor(arena.data(), {one.padded}), one);
  zero_all_gather(*comm, Tensor(arena.data(), {one.padded}), one);
  REQUIRE(arena == std::vector<float>(one.padded, 2.0f));
  REQUIRE(group_sum(*comm, 2.5) == 2.5);
}

TEST_CASE("watchdog clears finished ops and polls async ones", "[cpu]") {
  Watchdog dog(5.0, 0, nullptr);
  const uint64_t id = dog.begin("dp", "all_reduce", 0, 2);
  REQUIRE(dog.pending() == 1);
  dog.end(id);
  REQUIRE(dog.pending() == 0);
  std::atomic<int> polls{0};
  std::atomic<bool> released{false};
  dog.track("tp", "all_gather", 0, 2, [&] { return ++polls >= 3 ? 1 : 0; },
            [&] { released = true; });
  for (int i = 0; i < 500 && !released; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(released);
  REQUIRE(dog.pending() == 0);
}

TEST_CASE("watchdog reports a stuck collective and ends the process", "[cpu]") {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    Watchdog dog(0.3, 7, [] { std::fputs("abort_all called\n", stderr); });
    dog.begin("pp", "send_recv", 1, 4);
    std::this_thread::sleep_for(std::chrono::seconds(20));
    _exit(0);  // not reached: the watchdog ends the process first
  }
  close(pipe_fds[1]);
  std::string output;
  char buf[512];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof buf)) > 0) output.append(buf, n);
  close(pipe_fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == kWatchdogExitCode);
  REQUIRE(elapsed < 3.0);
  REQUIRE(elapsed >= 0.3);
  INFO(output);
  REQUIRE(output.find("trainer: watchdog: rank 7: send_recv on axis pp (group rank 1 of 4) has "
                      "not finished after") != std::string::npos);
  REQUIRE(output.find("abort_all called") != std::string::npos);
}

namespace {
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}
}  // namespace

TEST_CASE("TCP rendezvous hands rank 0's bytes to every rank", "[cpu]") {
  const int port = free_port();
  const int world = 4;
  std::vector<uint8_t> id(128);
  for (int i = 0; i < 128; ++i) id[i] = static_cast<uint8_t>(i * 7 + 3);
  std::vector<std::vector<uint8_t>> got(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  // Clients first: they must retry until rank 0 listens.
  for (int r = world - 1; r >= 0; --r) {
    threads.emplace_back([&, r] {
      try {
        got[r] = tcp_broadcast("localhost", port, r, world, r == 0 ? id : std::vector<uint8_t>{},
                               10.0);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
    if (r == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(got[r] == id);
  }
}

TEST_CASE("TCP rendezvous times out naming the address", "[cpu]") {
  const int port = free_port();
  REQUIRE_THROWS_WITH(tcp_broadcast("127.0.0.1", port, 1, 2, {}, 0.3),
                      Catch::Contains("127.0.0.1:" + std::to_string(port)));
}

TEST_CASE("a one-rank mesh holds single-rank communicators on every axis", "[cpu]") {
  LaunchEnv env;  // no launcher
  MeshRequest request;
  Mesh mesh(env, resolve_mesh(request), Device::cpu, 5.0);
  REQUIRE(mesh.logs());
  for (Axis axis : kAllAxes) {
    REQUIRE(mesh.comm(axis).size() == 1);
    REQUIRE(mesh.comm(axis).name() == axis_name(axis));
  }
  float x = 2.0f;
  mesh.comm(Axis::dp).all_reduce(Tensor(&x, {1}), ReduceOp::avg);
  REQUIRE(x == 2.0f);
  request.world = 2;
  REQUIRE_THROWS_WITH(Mesh(env, resolve_mesh(request), Device::cpu),
                      "parallel: the mesh was resolved for world 2 but the launcher (none) "
                      "started 1 ranks");
}

#if !TRAINER_MPI
TEST_CASE("a build without MPI refuses a multi-rank CPU launch", "[cpu]") {
  LaunchEnv env;
  env.launcher = "openmpi";
  env.rank = 0;
  env.world = 2;
  env.local_world = 2;
  MeshRequest request;
  request.world = 2;
  REQUIRE_THROWS_WITH(Mesh(env, resolve_mesh(request), Device::cpu),
                      "parallel: 2 ranks were launched (openmpi) but this build has no MPI; "
                      "install libopenmpi-dev and rebuild, or run one rank");
}
#endif
