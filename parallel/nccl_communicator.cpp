// The NCCL Communicator for GPU ranks: non-blocking communicators (abortable),
// collectives enqueued on a stream and tracked by the watchdog through events
// (see nccl_communicator.h). Written against nccl.h 2.28; on a GPU only as a
// world of one so far (one H200); several ranks run in CI against the emulated
// NCCL (test/cuda_emu/nccl.cpp, the e2e_nccl_* tests).
#include "parallel/nccl_communicator.h"

#include "kernels/error.h"

#if TRAINER_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kernels/cuda/nvtx.h"
#include "parallel/bootstrap.h"
#include "parallel/watchdog.h"

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t cuda_check_rc_ = (call);                                                   \
    if (cuda_check_rc_ != cudaSuccess)                                                     \
      ::trainer::throw_check_failure(#call, __FILE__, __LINE__,                            \
                                     cudaGetErrorString(cuda_check_rc_));                  \
  } while (0)

// Non-blocking communicators may answer ncclInProgress; the call is then
// finished by polling the communicator (bounded by the mesh timeout). GUARD is
// the communicator's Tracker (nullptr before one exists): the call and every
// poll are made under its lock, and not at all once the watchdog's abort has
// marked it dead, so this thread never passes NCCL a handle ncclCommAbort is
// freeing on the watchdog's thread.
#define NCCL_CHECK(comm, guard, call, timeout_s)                                           \
  do {                                                                                     \
    ncclResult_t nccl_check_rc_ = guarded((guard), [&] { return (call); });                \
    if (nccl_check_rc_ == ncclInProgress)                                                  \
      nccl_check_rc_ = wait_ready((comm), (timeout_s), (guard));                           \
    if (nccl_check_rc_ != ncclSuccess) ::trainer::parallel::park_if_watchdog_fired();      \
    if (nccl_check_rc_ != ncclSuccess)                                                     \
      ::trainer::throw_check_failure(                                                      \
          #call, __FILE__, __LINE__,                                                       \
          std::string(ncclGetErrorString(nccl_check_rc_)) + ": " + ncclGetLastError(comm)); \
  } while (0)
// A call on this communicator, from inside NcclCommunicator.
#define NCCL_CALL(call) NCCL_CHECK(comm_, tracker_.get(), call, timeout_s_)
#endif

namespace trainer::parallel {

#if TRAINER_NCCL
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::u16: return ncclFloat16;  // moved as bits, never reduced
    case DType::e4m3: return ncclFloat8e4m3;
    case DType::e5m2: return ncclFloat8e5m2;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // so that ncclCommAbort can interrupt a hung rank
  return cfg;
}

class NcclCommunicator;

// Names a call's host scope in Nsight Systems ("nccl all_reduce dp"); the
// kernels it enqueues show on the stream's row.
class OpRange {
 public:
  OpRange(const char* op, const std::string& axis)
      : label_(fmt::format("nccl {} {}", op, axis)), range_(label_.c_str()) {}

 private:
  std::string label_;
  cuda::NvtxRange range_;
};

// Every live NCCL communicator, so the watchdog can abort them all.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::set<NcclCommunicator*>& registry() {
  static std::set<NcclCommunicator*> r;
  return r;
}

// Host buffers of all_reduce/broadcast are moved through this many bytes at a
// time (a multiple of every dtype's size; the step's scalars fit in one pass).
constexpr size_t kStagingBytes = 4096;

// What the watchdog's poll and release closures of one communicator share
// with it: the event pool and the NCCL handle, co-owned so that a closure
// outliving the communicator (destroyed or aborted with an op pending) finds
// it marked dead instead of touching freed state.
struct Tracker {
  std::mutex mutex;
  bool live = true;  // false once the communicator is destroyed or aborted
  ncclComm_t comm = nullptr;
  int device = 0;
  std::vector<cudaEvent_t> free_events;
  ~Tracker() {
    for (cudaEvent_t ev : free_events) cudaEventDestroy(ev);
  }
  // 1 done (or the communicator is gone), 0 running, -1 failed.
  int poll(cudaEvent_t ev) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!live) return 1;
    cudaSetDevice(device);  // the watchdog thread starts on device 0
    const cudaError_t rc = cudaEventQuery(ev);
    if (rc == cudaSuccess) return 1;
    if (rc != cudaErrorNotReady) return -1;
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return -1;
    return state == ncclSuccess || state == ncclInProgress ? 0 : -1;
  }
  void kill() {
    std::lock_guard<std::mutex> lock(mutex);
    live = false;
  }
};

// What this thread's NCCL calls share with abort(): `call` runs under the
// tracker's lock while the communicator is live; a dead one answers
// ncclInvalidUsage without touching the handle (NCCL_CHECK then parks if the
// watchdog fired, which is why it is dead).
template <class Call>
ncclResult_t guarded(Tracker* guard, Call&& call) {
  if (!guard) return call();
  std::lock_guard<std::mutex> lock(guard->mutex);
  return guard->live ? call() : ncclInvalidUsage;
}

ncclResult_t wait_ready(ncclComm_t comm, double timeout_s, Tracker* guard = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  ncclResult_t state = ncclInProgress;
  while (true) {
    const ncclResult_t rc = guarded(guard, [&] { return ncclCommGetAsyncError(comm, &state); });
    if (rc != ncclSuccess) return rc;
    if (state != ncclInProgress) return state;
    if (std::chrono::steady_clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::string name, ncclComm_t comm, int device, double timeout_s)
      : Communicator(std::move(name), comm_rank(comm), comm_size(comm)),
        comm_(comm),
        device_(device),
        timeout_s_(timeout_s) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
    stream_ = own_stream_;
    CUDA_CHECK(cudaMalloc(&staging_, kStagingBytes));
    CUDA_CHECK(cudaMallocHost(&pinned_, kStagingBytes));
    CUDA_CHECK(cudaEventCreateWithFlags(&sync_event_, cudaEventDisableTiming));
    tracker_->comm = comm;
    tracker_->device = device;
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().insert(this);
  }
  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(registry_mutex());
      registry().erase(this);
    }
    tracker_->kill();
    if (!aborted_.exchange(true)) {
      if (ncclCommFinalize(comm_) == ncclInProgress) wait_ready(comm_, timeout_s_);
      ncclCommDestroy(comm_);
    }
    cudaEventDestroy(sync_event_);
    cudaFree(staging_);
    cudaFreeHost(pinned_);
    cudaStreamDestroy(own_stream_);
  }

  ncclComm_t comm() const { return comm_; }
  int device() const { return device_; }
  double timeout_s() const { return timeout_s_; }
  void set_stream(cudaStream_t stream) { stream_ = stream ? stream : own_stream_; }

  void all_reduce(Tensor buf, ReduceOp op) override {
    OpRange range("all_reduce", name());
    if (buf.device == Device::cpu) {
      const ncclDataType_t type = reduce_type(buf, "all_reduce");
      through_staging(buf, "all_reduce", [&](void* dev, size_t count) {
        NCCL_CALL(ncclAllReduce(dev, dev, count, type, nccl_op(op), comm_, stream_));
      });
      return;
    }
    check(buf, "all_reduce");
    NCCL_CALL(ncclAllReduce(buf.data, buf.data, buf.numel(), reduce_type(buf, "all_reduce"),
                            nccl_op(op), comm_, stream_));
    track("all_reduce");
  }
  void reduce_scatter(Tensor send, Tensor recv, ReduceOp op) override {
    OpRange range("reduce_scatter", name());
    check(send, "reduce_scatter");
    check(recv, "reduce_scatter");
    check_count(*this, "reduce_scatter", send, recv.numel() * size(), "send");
    NCCL_CALL(ncclReduceScatter(send.data, recv.data, recv.numel(),
                                reduce_type(send, "reduce_scatter"), nccl_op(op), comm_, stream_));
    track("reduce_scatter");
  }
  void all_gather(Tensor send, Tensor recv) override {
    OpRange range("all_gather", name());
    check(send, "all_gather");
    check(recv, "all_gather");
    check_count(*this, "all_gather", recv, send.numel() * size(), "recv");
    NCCL_CALL(
        ncclAllGather(send.data, recv.data, send.numel(), nccl_type(send.dtype), comm_, stream_));
    track("all_gather");
  }
  void broadcast(Tensor buf, int root) override {
    OpRange range("broadcast", name());
    if (buf.device == Device::cpu) {
      through_staging(buf, "broadcast", [&](void* dev, size_t count) {
        NCCL_CALL(ncclBroadcast(dev, dev, count, nccl_type(buf.dtype), root, comm_, stream_));
      });
      return;
    }
    check(buf, "broadcast");
    NCCL_CALL(
        ncclBroadcast(buf.data, buf.data, buf.numel(), nccl_type(buf.dtype), root, comm_, stream_));
    track("broadcast");
  }
  void send(Tensor buf, int peer) override { send_recv(buf, peer, Tensor(), -1); }
  void recv(Tensor buf, int peer) override { send_recv(Tensor(), -1, buf, peer); }
  void send_recv(Tensor s, int send_peer, Tensor r, int recv_peer) override {
    const char* op = s.empty() ? "recv" : r.empty() ? "send" : "send_recv";
    OpRange range(op, name());
    if (!s.empty()) check(s, op);
    if (!r.empty()) check(r, op);
    // Paired inside one group so neighbours exchanging both ways cannot deadlock.
    NCCL_CALL(ncclGroupStart());
    if (!s.empty()) {
      NCCL_CALL(ncclSend(s.data, s.numel(), nccl_type(s.dtype), send_peer, comm_, stream_));
    }
    if (!r.empty()) {
      NCCL_CALL(ncclRecv(r.data, r.numel(), nccl_type(r.dtype), recv_peer, comm_, stream_));
    }
    NCCL_CALL(ncclGroupEnd());
    track(op);
  }
  void batch_p2p(std::span<const P2pOp> ops) override {
    OpRange range("batch_p2p", name());
    if (ops.empty()) return;
    for (const P2pOp& op : ops) {
      check(op.buf, op.kind == P2pOp::send ? "send" : "recv");
      TRAINER_CHECK(op.peer >= 0 && op.peer < size() && op.peer != rank(),
                    "batch_p2p on axis {}: peer {} (rank {} of {})", name(), op.peer, rank(),
                    size());
    }
    NCCL_CALL(ncclGroupStart());
    for (const P2pOp& op : ops) {
      if (op.kind == P2pOp::send) {
        NCCL_CALL(ncclSend(op.buf.data, op.buf.numel(), nccl_type(op.buf.dtype), op.peer, comm_,
                           stream_));
      } else {
        NCCL_CALL(ncclRecv(op.buf.data, op.buf.numel(), nccl_type(op.buf.dtype), op.peer, comm_,
                           stream_));
      }
    }
    NCCL_CALL(ncclGroupEnd());
    track("batch_p2p");
  }
  void all_to_allv(Tensor send, std::span<const int64_t> send_counts, Tensor recv,
                   std::span<const int64_t> recv_counts) override {
    OpRange range("all_to_allv", name());
    check(send, "all_to_allv");
    check(recv, "all_to_allv");
    TRAINER_CHECK(static_cast<int>(send_counts.size()) == size() &&
                      static_cast<int>(recv_counts.size()) == size(),
                  "all_to_allv on axis {}: counts for {} ranks expected", name(), size());
    TRAINER_CHECK(send.dtype == recv.dtype, "all_to_allv on axis {}: dtypes differ", name());
    int64_t send_total = 0, recv_total = 0;
    for (int p = 0; p < size(); ++p) {
      TRAINER_CHECK(send_counts[p] >= 0 && recv_counts[p] >= 0,
                    "all_to_allv on axis {}: negative count", name());
      send_total += send_counts[p];
      recv_total += recv_counts[p];
    }
    check_count(*this, "all_to_allv", send, send_total, "send (sum of send_counts)");
    check_count(*this, "all_to_allv", recv, recv_total, "recv (sum of recv_counts)");
    const size_t elem = dtype_size(send.dtype);
    const ncclDataType_t type = nccl_type(send.dtype);
    int64_t send_off = 0, recv_off = 0;
    NCCL_CALL(ncclGroupStart());
    for (int p = 0; p < size(); ++p) {
      // Zero counts are skipped on both sides, as NCCL requires matching pairs.
      if (send_counts[p] > 0) {
        NCCL_CALL(ncclSend(static_cast<char*>(send.data) + send_off * elem, send_counts[p], type, p,
                           comm_, stream_));
      }
      if (recv_counts[p] > 0) {
        NCCL_CALL(ncclRecv(static_cast<char*>(recv.data) + recv_off * elem, recv_counts[p], type, p,
                           comm_, stream_));
      }
      send_off += send_counts[p];
      recv_off += recv_counts[p];
    }
    NCCL_CALL(ncclGroupEnd());
    track("all_to_allv");
  }
  void barrier() override {
    NCCL_CALL(ncclAllReduce(staging_, staging_, 1, ncclFloat32, ncclSum, comm_, stream_));
    track("barrier");
    synchronize();
  }
  void synchronize() override {
    CUDA_CHECK(cudaEventRecord(sync_event_, stream_));
    // Polling, not cudaStreamSynchronize: a hung collective is then ended by
    // the watchdog's ncclCommAbort instead of blocking this thread forever.
    while (true) {
      const cudaError_t rc = cudaEventQuery(sync_event_);
      if (rc == cudaSuccess) return;
      if (rc != cudaErrorNotReady || aborted_.load()) park_if_watchdog_fired();
      TRAINER_CHECK(rc == cudaErrorNotReady, "synchronize on axis {}: {}", name(),
                    cudaGetErrorString(rc));
      TRAINER_CHECK(!aborted_.load(), "synchronize on axis {}: communicator aborted", name());
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void abort() noexcept override {
    if (aborted_.exchange(true)) return;
    // Waits for a call this rank's thread is making to return; after it no
    // thread (this one's NCCL_CHECK, the watchdog's poll) touches the handle
    // ncclCommAbort frees.
    tracker_->kill();
    ncclCommAbort(comm_);
  }

 private:
  static int comm_rank(ncclComm_t comm) {
    int r = 0;
    ncclCommUserRank(comm, &r);
    return r;
  }
  static int comm_size(ncclComm_t comm) {
    int n = 0;
    ncclCommCount(comm, &n);
    return n;
  }
  void check(const Tensor& t, const char* op) const {
    check_buffer(*this, op, t);
    TRAINER_CHECK(t.device == Device::cuda, "{} on axis {}: NCCL needs a cuda tensor, got {}", op,
                  name(), t.str());
  }
  // A host buffer moved through the pinned and device staging pair, one
  // kStagingBytes piece at a time: copy in, `collective(device, count)`, copy
  // out, wait (polling), so the call has completed when it returns.
  template <class Collective>
  void through_staging(const Tensor& buf, const char* op, Collective&& collective) {
    check_buffer(*this, op, buf);
    const size_t elem = dtype_size(buf.dtype), total = buf.nbytes();
    char* host = static_cast<char*>(buf.data);
    for (size_t off = 0; off < total; off += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, total - off);
      std::memcpy(pinned_, host + off, n);
      CUDA_CHECK(cudaMemcpyAsync(staging_, pinned_, n, cudaMemcpyHostToDevice, stream_));
      collective(staging_, n / elem);
      track(op);
      CUDA_CHECK(cudaMemcpyAsync(pinned_, staging_, n, cudaMemcpyDeviceToHost, stream_));
      synchronize();
      std::memcpy(host + off, pinned_, n);
    }
  }
  ncclDataType_t reduce_type(const Tensor& t, const char* op) const {
    TRAINER_CHECK(t.dtype != DType::u16 && t.dtype != DType::e4m3 && t.dtype != DType::e5m2,
                  "{} on axis {}: cannot reduce {}", op, name(), dtype_name(t.dtype));
    return nccl_type(t.dtype);
  }

  // Hands the op just enqueued to the watchdog, which polls its event.
  void track(const char* op) {
    Watchdog* dog = watchdog();
    if (!dog) return;
    cudaEvent_t ev = nullptr;
    {
      std::lock_guard<std::mutex> lock(tracker_->mutex);
      if (!tracker_->free_events.empty()) {
        ev = tracker_->free_events.back();
        tracker_->free_events.pop_back();
      }
    }
    if (!ev) CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev, stream_));
    std::shared_ptr<Tracker> t = tracker_;
    dog->track(name().c_str(), op, rank(), size(), [t, ev] { return t->poll(ev); },
               [t, ev] {
                 std::lock_guard<std::mutex> lock(t->mutex);
                 t->free_events.push_back(ev);
               });
  }

  ncclComm_t comm_;
  int device_;
  double timeout_s_;
  cudaStream_t own_stream_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t sync_event_ = nullptr;
  void* staging_ = nullptr;  // kStagingBytes on the device (host buffers, barrier)
  void* pinned_ = nullptr;   // kStagingBytes of pinned host memory
  std::atomic<bool> aborted_{false};
  std::shared_ptr<Tracker> tracker_ = std::make_shared<Tracker>();
};

ncclUniqueId share_unique_id(const LaunchEnv& env, double timeout_s) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (env.rank == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&id);
    TRAINER_CHECK(rc == ncclSuccess, "ncclGetUniqueId: {}", ncclGetErrorString(rc));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(&id);
  const Bootstrapped got = bootstrap_broadcast(env, std::vector<uint8_t>(p, p + sizeof id), timeout_s);
  TRAINER_CHECK(got.bytes.size() == sizeof id, "bootstrap ({}): got {} bytes, expected a {}-byte id",
                got.via, got.bytes.size(), sizeof id);
  std::memcpy(&id, got.bytes.data(), sizeof id);
  return id;
}

}  // namespace

bool nccl_available() { return true; }
bool is_nccl(const Communicator& comm) { return dynamic_cast<const NcclCommunicator*>(&comm); }

std::unique_ptr<Communicator> make_nccl_world(const LaunchEnv& env, double timeout_s) {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  TRAINER_INPUT_CHECK(env.local_rank < devices,
                      "launch environment ({}): local rank {} but this node has {} GPUs",
                      env.launcher, env.local_rank, devices);
  CUDA_CHECK(cudaSetDevice(env.local_rank));
  const ncclUniqueId id = share_unique_id(env, timeout_s);
  ncclConfig_t cfg = nonblocking_config();
  ncclComm_t comm = nullptr;
  NCCL_CHECK(comm, nullptr, ncclCommInitRankConfig(&comm, env.world, id, env.rank, &cfg), timeout_s);
  // Initialisation itself may still be running after a non-blocking call returns.
  const ncclResult_t state = wait_ready(comm, timeout_s);
  TRAINER_CHECK(state == ncclSuccess, "rank {}: NCCL world init: {} after {} s", env.rank,
                ncclGetErrorString(state), timeout_s);
  return std::make_unique<NcclCommunicator>("world", comm, env.local_rank, timeout_s);
}

std::unique_ptr<Communicator> nccl_split(Communicator& parent, int color, int key,
                                         std::string name, double timeout_s) {
  auto* nccl_parent = dynamic_cast<NcclCommunicator*>(&parent);
  TRAINER_CHECK(nccl_parent != nullptr, "nccl_split of axis {}: parent {} is not NCCL", name,
                parent.name());
  ncclConfig_t cfg = nonblocking_config();
  ncclComm_t comm = nullptr;
  // A non-blocking split answers ncclInProgress; the new communicator, not
  // the parent, is then polled until it is ready.
  const ncclResult_t rc = ncclCommSplit(nccl_parent->comm(), color, key, &comm, &cfg);
  TRAINER_CHECK(rc == ncclSuccess || rc == ncclInProgress, "ncclCommSplit of axis {}: {}: {}",
                name, ncclGetErrorString(rc), ncclGetLastError(nccl_parent->comm()));
  const ncclResult_t state = wait_ready(comm, timeout_s);
  TRAINER_CHECK(state == ncclSuccess, "NCCL split of axis {}: {}", name, ncclGetErrorString(state));
  return std::make_unique<NcclCommunicator>(std::move(name), comm, nccl_parent->device(),
                                            timeout_s);
}

void nccl_set_stream(Communicator& comm, void* cuda_stream) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&comm);
  if (nccl) nccl->set_stream(static_cast<cudaStream_t>(cuda_stream));
}

void nccl_abort_all() noexcept {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (NcclCommunicator* c : registry()) c->abort();
}

void cuda_device_copy(void* dst, const void* src, size_t bytes, Device device) {
  // The ops run on non-blocking streams, which a legacy-stream cudaMemcpy
  // would not wait for.
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
}

#else  // no NCCL in this build
}  // namespace trainer::parallel

#if TRAINER_CUDA
#include <cuda_runtime.h>
#endif

namespace trainer::parallel {
namespace {
[[noreturn]] void no_nccl() {
  throw Error("this build has no NCCL (configure with CUDA and NCCL present)");
}
}  // namespace

bool nccl_available() { return false; }
bool is_nccl(const Communicator&) { return false; }
std::unique_ptr<Communicator> make_nccl_world(const LaunchEnv&, double) { no_nccl(); }
std::unique_ptr<Communicator> nccl_split(Communicator&, int, int, std::string, double) {
  no_nccl();
}
void nccl_set_stream(Communicator&, void*) {}
void nccl_abort_all() noexcept {}
void cuda_device_copy(void* dst, const void* src, size_t bytes, Device) {
#if TRAINER_CUDA
  cudaError_t rc = cudaDeviceSynchronize();
  if (rc == cudaSuccess) rc = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
  if (rc == cudaSuccess) rc = cudaDeviceSynchronize();
  TRAINER_CHECK(rc == cudaSuccess, "cudaMemcpy: {}", cudaGetErrorString(rc));
#else
  throw Error("this build has no CUDA");
#endif
}

#endif

}  // namespace trainer::parallel
