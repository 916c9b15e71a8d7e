// [nccl] on one GPU, as a world of one NCCL rank (one H200 cannot hold two):
// the device path of the step's scalars (host buffers through the staging
// pair: group_sum, several staging pieces, every op and dtype the trainer
// uses), the bucket reducer overlapped on the communication stream (buckets
// wait for the compute stream's event, compute is not held up by them, the
// optimizer's stream waits for them after finish), ZeRO's per-region fences
// (CommStreamOverlap with one event per region: the same orders), and the watchdog ending a
// stuck NCCL collective (its line, exit 3, in bounded time). A world of one
// cannot show two ranks' numbers meeting: that needs two GPUs
// (scripts/gpu_check.sh). Exit 77 (ctest "skipped") without a GPU.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_state.h"
#include "kernels/elementwise.h"
#include "kernels/memory.h"
#include "parallel/grad_sync.h"
#include "parallel/nccl_communicator.h"
#include "parallel/stream_order.h"
#include "parallel/watchdog.h"

using namespace trainer;
using namespace trainer::parallel;
using Clock = std::chrono::steady_clock;

namespace {

int failures = 0;
void expect(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

// Holds a stream until *flag is set (a host function may not call CUDA).
void CUDART_CB hold_until(void* flag) {
  auto* f = static_cast<std::atomic<int>*>(flag);
  while (f->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
void CUDART_CB sleep_3s(void*) { std::this_thread::sleep_for(std::chrono::seconds(3)); }

// cudaEventQuery until done or `seconds` pass.
bool completes_within(cudaEvent_t ev, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (cudaEventQuery(ev) == cudaSuccess) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// The compute stream's work at `ev` waits for the held communication
// stream, and runs once `go` releases it.
void expect_held_then_released(cudaEvent_t ev, std::atomic<int>& go, const char* what) {
  expect(!completes_within(ev, 0.05), what);
  go = 1;
  expect(completes_within(ev, 5.0), "and runs once it is done");
}

struct Gpu {
  std::unique_ptr<Communicator> world;
  CudaState* state = nullptr;
  Context ctx;
  Gpu() {
    LaunchEnv env;  // one rank
    world = make_nccl_world(env, 60.0);
    state = create_cuda_state(0);
    ctx = Context{Device::cuda, state};
    bind_compute_stream(*world, ctx);
  }
  ~Gpu() {
    unbind_compute_stream(*world);
    world.reset();
    destroy_cuda_state(state);
  }
};

void scalars(Gpu& g, Watchdog& dog) {
  Communicator& w = *g.world;
  expect(group_sum(w, 2.5) == 2.5, "group_sum of a host double on an NCCL communicator");
  // 1500 doubles: three staging pieces of 4 KiB.
  std::vector<double> d(1500), want;
  for (size_t i = 0; i < d.size(); ++i) d[i] = 0.25 * double(i) - 100.0;
  want = d;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
    w.all_reduce(Tensor(d.data(), {int64_t(d.size())}, DType::f64), op);
  expect(d == want, "host f64 all_reduce sum/avg/max over several staging pieces");
  std::vector<float> f = {1.5f, -2.0f, 1e30f, 0.0f, 7.25f};
  std::vector<float> fwant = f;
  w.all_reduce(Tensor(f.data(), {5}, DType::f32), ReduceOp::max);
  w.broadcast(Tensor(f.data(), {5}, DType::f32), 0);
  expect(f == fwant, "host f32 all_reduce max and broadcast");
  std::vector<int32_t> n(2049, 3);
  w.all_reduce(Tensor(n.data(), {2049}, DType::i32), ReduceOp::sum);
  expect(n == std::vector<int32_t>(2049, 3), "host i32 all_reduce, a ragged last piece");
  // A host reduction is ordered after the compute stream's work (it uses
  // that stream): a device value written just before is reduced complete.
  void* mem = device_alloc(Device::cuda, 4096);
  Tensor dev(mem, {1024}, DType::f32, Device::cuda);
  fill(g.ctx, dev, 0.5f);
  w.all_reduce(dev, ReduceOp::sum);
  float back[1024];
  wait_for_device(g.ctx);
  copy_to_host(back, dev);
  expect(back[0] == 0.5f && back[1023] == 0.5f, "device all_reduce in stream order after a fill");
  device_free(Device::cuda, mem);
  for (int i = 0; i < 2000 && dog.pending() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  expect(dog.pending() == 0, "the watchdog saw every staged collective complete");
}

// A case's end: the device idle, its memory freed, and the watchdog saw
// every collective it registered complete.
void finish_case(Gpu& g, Watchdog& dog, cudaEvent_t ev, void* mem, const char* what) {
  wait_for_device(g.ctx);
  cudaEventDestroy(ev);
  device_free(Device::cuda, mem);
  for (int i = 0; i < 2000 && dog.pending() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  expect(dog.pending() == 0, what);
}

void overlap(Gpu& g, Watchdog& dog) {
  CudaState& st = *g.state;
  const int T = 32;
  const int64_t per = int64_t(1) << 17, n = per * T;  // 16 MiB of gradients
  void* mem = device_alloc(Device::cuda, size_t(n) * 4);
  Tensor arena(mem, {n}, DType::f32, Device::cuda);
  // Tensor t (backward order) sits at the arena's end first, like a model's last layer.
  std::vector<GradRange> ranges;
  for (int t = 0; t < T; ++t) ranges.push_back({(T - 1 - t) * per, per});
  GradReducer red(*g.world, arena, ranges, per * 4 * 4);  // 4 tensors per bucket
  CommStreamOverlap ov(g.ctx, {g.world.get()});
  expect(ov.active(), "the overlap is active for a GPU context and an NCCL communicator");
  red.set_before_reduce([&] { ov.begin(); });
  red.set_after_reduce([&] { ov.join(); });
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);

  // 1. A bucket waits for the compute stream: hold compute, fill and mark.
  std::atomic<int> compute_go{0};
  cudaLaunchHostFunc(st.stream, hold_until, &compute_go);
  for (int t = 0; t < T; ++t) {
    fill(g.ctx, arena.slice(ranges[t].offset, ranges[t].offset + per), float(t + 1));
    red.mark_ready(t);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  expect(cudaStreamQuery(st.comm_stream) == cudaErrorNotReady,
         "buckets on the communication stream wait for the held compute stream");
  compute_go = 1;
  red.finish();
  wait_for_device(g.ctx);
  std::vector<float> host(static_cast<size_t>(n));
  copy_to_host(host.data(), arena);
  bool values = true;
  for (int t = 0; t < T; ++t)
    values = values && host[size_t(ranges[t].offset)] == float(t + 1) &&
             host[size_t(ranges[t].offset + per - 1)] == float(t + 1);
  expect(values, "every tensor reduced (a world of one: unchanged)");
  expect(red.buckets_reduced_early() == int(red.buckets().size()) && red.buckets().size() == 8,
         "all 8 buckets went out from mark_ready");

  // 2. Compute is not held up by the buckets, until finish(): hold the comm stream.
  std::atomic<int> comm_go{0};
  cudaLaunchHostFunc(st.comm_stream, hold_until, &comm_go);
  for (int t = 0; t < T; ++t) {
    fill(g.ctx, arena.slice(ranges[t].offset, ranges[t].offset + per), 2.0f);
    red.mark_ready(t);
  }
  fill(g.ctx, arena.slice(0, 1), 2.0f);  // more backward work after the buckets
  cudaEventRecord(ev, st.stream);
  expect(completes_within(ev, 5.0), "compute after the buckets runs while they wait");
  red.finish();  // the optimizer's stream now waits for the buckets
  fill(g.ctx, arena.slice(0, 1), 2.0f);
  cudaEventRecord(ev, st.stream);
  expect_held_then_released(ev, comm_go, "after finish() compute waits for the held buckets");
  finish_case(g, dog, ev, mem, "the watchdog saw every bucket complete");
}

// CommStreamOverlap (ZeRO-2/3's per-region collectives): a fenced collective
// waits for the compute stream; the communicator is back on the compute
// stream after end(); the compute stream waits for a fence only at wait().
void fences(Gpu& g, Watchdog& dog) {
  CudaState& st = *g.state;
  const int64_t n = int64_t(1) << 16;
  void* mem = device_alloc(Device::cuda, size_t(3 * n) * 4);
  float* base = static_cast<float*>(mem);
  Tensor src(base, {n}, DType::f32, Device::cuda);
  Tensor out(base + n, {n}, DType::f32, Device::cuda);
  Tensor other(base + 2 * n, {n}, DType::f32, Device::cuda);
  CommStreamOverlap fen(g.ctx, {g.world.get()}, 2);
  expect(fen.active(), "the fences are active for a GPU context and an NCCL communicator");
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);

  // 1. A fenced reduce-scatter waits for the compute stream's work before it.
  std::atomic<int> compute_go{0};
  cudaLaunchHostFunc(st.stream, hold_until, &compute_go);
  fill(g.ctx, src, 3.0f);
  fen.begin();
  g.world->reduce_scatter(src, out, ReduceOp::avg);
  fen.end(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  expect(cudaStreamQuery(st.comm_stream) == cudaErrorNotReady,
         "a fenced reduce-scatter waits for the held compute stream");
  compute_go = 1;

  // 2. Hold the communication stream: compute runs on until it waits for the fence.
  std::atomic<int> comm_go{0};
  cudaLaunchHostFunc(st.comm_stream, hold_until, &comm_go);
  fill(g.ctx, src, 5.0f);
  fill(g.ctx, other, 1.0f);
  fen.begin();
  g.world->reduce_scatter(src, out, ReduceOp::avg);
  fen.end(1);
  g.world->all_gather(src, other);  // back on the compute stream (a world of one: a copy)
  cudaEventRecord(ev, st.stream);
  float first = 0.0f;
  const bool ran = completes_within(ev, 5.0);
  cudaMemcpy(&first, other.data, sizeof(float), cudaMemcpyDeviceToHost);  // waits for neither stream
  expect(ran && first == 5.0f,
         "after end() the communicator's calls run on the compute stream, past the held one");
  fen.wait(1);
  copy(g.ctx, other, out);  // what the optimizer's side reads: the collective's result
  cudaEventRecord(ev, st.stream);
  expect_held_then_released(ev, comm_go, "after wait(fence) compute waits for the held collective");
  wait_for_device(g.ctx);
  std::vector<float> back(static_cast<size_t>(n));
  copy_to_host(back.data(), other);
  expect(back.front() == 5.0f && back.back() == 5.0f,
         "compute read the fenced reduce-scatter's result, not the one before it");

  // 3. join: compute waits for everything on the communication stream.
  comm_go = 0;
  cudaLaunchHostFunc(st.comm_stream, hold_until, &comm_go);
  fen.begin();
  g.world->all_gather(src, out);
  fen.end(0);
  fen.join();
  cudaEventRecord(ev, st.stream);
  expect_held_then_released(ev, comm_go, "after join() compute waits for the held collective");
  finish_case(g, dog, ev, mem, "the watchdog saw every fenced collective complete");
}

// The child: an all_reduce queued behind a stream held for 3 s; timeout 1 s.
int stuck_collective_child() {
  Gpu g;
  Watchdog dog(1.0, 0, [] { nccl_abort_all(); });
  g.world->set_watchdog(&dog);
  void* mem = device_alloc(Device::cuda, 1024);
  cudaLaunchHostFunc(g.state->stream, sleep_3s, nullptr);
  g.world->all_reduce(Tensor(mem, {256}, DType::f32, Device::cuda), ReduceOp::sum);
  g.world->synchronize();  // polls; the watchdog ends the process first
  std::fprintf(stderr, "child: synchronize returned\n");
  return 0;
}

void watchdog_ends_stuck_collective() {
  const char* self = "/proc/self/exe";  // argv[0] may be a bare name
  char log[] = "/tmp/nccl_streams_watchdog_XXXXXX";
  const int fd = mkstemp(log);
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 2);
    execl(self, "parallel_nccl_streams", "--stuck-collective", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fd);
  int status = 0;
  bool ended = false;
  while (Clock::now() - start < std::chrono::seconds(30)) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ended = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!ended) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(log);
  std::printf("watchdog child: %s after %.1f s, stderr:\n%s", ended ? "ended" : "killed", s,
              text.str().c_str());
  expect(ended && WIFEXITED(status) && WEXITSTATUS(status) == kWatchdogExitCode,
         "a stuck NCCL all_reduce ends the process with the watchdog's status");
  expect(text.str().find("trainer: watchdog: rank 0: all_reduce on axis world (group rank 0 of 1) "
                         "has not finished") != std::string::npos,
         "the watchdog names rank, axis and op");
  expect(s < 1.0 + kAbortGraceS + 5.0, "within timeout + abort grace");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--stuck-collective") return stuck_collective_child();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  try {
    Gpu g;
    Watchdog dog(60.0, 0, [] { nccl_abort_all(); });
    g.world->set_watchdog(&dog);
    scalars(g, dog);
    overlap(g, dog);
    fences(g, dog);
    g.world->set_watchdog(nullptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
  watchdog_ends_stuck_collective();
  std::printf(failures ? "nccl streams: %d failures\n" : "nccl streams: ok\n", failures);
  return failures ? 1 : 0;
}
