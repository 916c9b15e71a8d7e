// NCCL communicator on one GPU (world 1: one H200 cannot hold two NCCL ranks):
// non-blocking init and split, every collective enqueued, tracked by the
// watchdog and checked after synchronize(), then finalize. Exit 77 (ctest
// "skipped") when no GPU is visible.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "parallel/nccl_communicator.h"
#include "parallel/watchdog.h"

using namespace trainer;
using namespace trainer::parallel;

namespace {

int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what);
    ++failures;
  }
}

std::vector<float> to_host(const float* d, size_t n) {
  std::vector<float> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  return h;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  try {
    LaunchEnv env;  // one rank, rendezvous on 127.0.0.1
    auto world = make_nccl_world(env, 60.0);
    auto dp = nccl_split(*world, 0, 0, "dp", 60.0);
    expect(world->size() == 1 && world->rank() == 0, "world is one rank");
    expect(dp->size() == 1 && dp->name() == "dp", "split gives a group of one");
    Watchdog dog(30.0, 0, [&] { dp->abort(); world->abort(); });
    dp->set_watchdog(&dog);

    const int n = 4097;  // ragged on purpose
    std::vector<float> host(n);
    for (int i = 0; i < n; ++i) host[i] = 0.5f * i - 7.0f;
    float *a = nullptr, *b = nullptr;
    cudaMalloc(&a, n * sizeof(float));
    cudaMalloc(&b, n * sizeof(float));
    cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    Tensor ta(a, {n}, DType::f32, Device::cuda), tb(b, {n}, DType::f32, Device::cuda);

    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) dp->all_reduce(ta, op);
    dp->synchronize();
    expect(to_host(a, n) == host, "all_reduce of one rank is the identity");
    cudaMemset(b, 0, n * sizeof(float));
    dp->reduce_scatter(ta, tb, ReduceOp::avg);
    dp->synchronize();
    expect(to_host(b, n) == host, "reduce_scatter copies");
    cudaMemset(b, 0, n * sizeof(float));
    dp->all_gather(ta, tb);
    dp->broadcast(tb, 0);
    dp->synchronize();
    expect(to_host(b, n) == host, "all_gather + broadcast copy");
    cudaMemset(b, 0, n * sizeof(float));
    const int64_t counts[1] = {n};
    dp->all_to_allv(ta, counts, tb, counts);
    dp->synchronize();
    expect(to_host(b, n) == host, "all_to_allv to oneself copies");
    dp->barrier();
    // The watchdog forgets completed ops (it polls their events).
    for (int i = 0; i < 1000 && dog.pending() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    expect(dog.pending() == 0, "watchdog saw every op complete");

    dp->set_watchdog(nullptr);
    cudaFree(a);
    cudaFree(b);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
  std::printf(failures ? "nccl smoke: %d failures\n" : "nccl smoke: ok\n", failures);
  return failures ? 1 : 0;
}
