// The emulator's streams and events. Work queued on a stream (a kernel, an
// async copy or memset, a cuBLASLt matmul, cub's sort, the output of an
// emulated NCCL collective) does not run when it is queued: it runs when the
// host waits for it (a stream or event synchronize or query, a device
// synchronize, a copy to pageable memory, cudaFree) or when another stream's
// queued work reaches a cudaStreamWaitEvent on an event recorded after it. That
// is the latest a GPU may run it, so work that another stream or the host
// reads without an event or a synchronize in between has not happened yet
// (cudaMalloc's memory still holds its NaN filling) and the test that relied on
// luck fails, where running everything at once would have hidden the missing
// order. The legacy default stream (nullptr) runs its work at once, after the
// blocking streams' (cudaStreamDefault) queued work, as it waits for theirs;
// non-blocking streams do not wait for it, nor it for them.
//
// One recursive mutex covers the queues and the running of their work: a
// query from the watchdog's thread may run work while the main thread queues
// more, and work runs on whichever thread waits for it, one task at a time.
//
// A task may be a poll (enqueue_poll): the emulated NCCL's landing of a
// result, which can only run once the other ranks have joined the exchange.
// Until its poll succeeds the stream (and every stream waiting on it through
// an event) stops there: a query answers cudaErrorNotReady, and a host wait
// retries with the mutex released, so the watchdog's thread can still query,
// find the collective stuck and abort, as on a GPU whose peer never joins.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "cuda_runtime.h"
#include "runtime_state.h"

namespace cuda_emu {
namespace {

struct Queue {
  explicit Queue(unsigned f) : flags(f) {}
  unsigned flags;
  std::deque<std::function<bool()>> pending;  // false: a poll not ready yet, run again later
  uint64_t enqueued = 0;  // tasks ever queued
  uint64_t done = 0;      // tasks run: pending holds tasks [done, enqueued)
  bool running = false;
};

// What an event's record saw when it ran: cudaEventElapsedTime's timestamps.
struct Stamp {
  bool ran = false;
  std::chrono::steady_clock::time_point when;
};

}  // namespace
}  // namespace cuda_emu

struct CUstream_st {
  std::shared_ptr<cuda_emu::Queue> queue;
};
struct CUevent_st {
  unsigned flags;
  std::shared_ptr<cuda_emu::Queue> queue;  // where last recorded; null: never recorded
  uint64_t target = 0;                     // complete once queue->done reaches it
  std::shared_ptr<cuda_emu::Stamp> stamp = std::make_shared<cuda_emu::Stamp>();
};

namespace cuda_emu {
namespace {

struct Streams {
  std::recursive_mutex mutex;
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  std::shared_ptr<Queue> legacy = std::make_shared<Queue>(cudaStreamDefault);
};

Streams& st() {
  static Streams* s = new Streams();  // never destroyed: streams may be used from static destructors
  return *s;
}

bool live(const Streams& s, cudaStream_t stream) {
  return stream == nullptr || s.streams.count(stream) != 0;
}

std::shared_ptr<Queue> queue_of(Streams& s, cudaStream_t stream) {
  return stream == nullptr ? s.legacy : stream->queue;
}

// Runs q's queued tasks until `target` have run (and, through the waits among
// them, what they wait for on other streams); false if a poll among them is
// not ready yet (the tasks before it have run).
bool run_until(Queue& q, uint64_t target) {
  if (q.done >= target) return true;
  if (q.running) {
    // Only a cycle of event waits, which hangs a GPU too, asks a stream to run
    // past the task it is running.
    std::fprintf(stderr, "cuda emulator: streams wait for each other's events in a cycle\n");
    std::abort();
  }
  q.running = true;
  bool reached = true;
  while (q.done < target) {
    // Run in place: a poll that is not ready stays first. (A task never pops
    // this queue: running guards it; a push keeps references valid.)
    if (!q.pending.front()()) {
      reached = false;
      break;
    }
    q.pending.pop_front();
    ++q.done;
  }
  q.running = false;
  return reached;
}

bool run_all(Queue& q) { return run_until(q, q.enqueued); }

bool run_blocking_streams(Streams& s) {
  bool all = true;
  for (CUstream_st* stream : s.streams)
    if (!(stream->queue->flags & cudaStreamNonBlocking)) all = run_all(*stream->queue) && all;
  return all;
}

// The legacy stream's work, after the blocking streams' queued work.
bool run_legacy(Streams& s) { return run_blocking_streams(s) && run_all(*s.legacy); }

// A host wait: tries `attempt` under the mutex until it reports done,
// releasing the mutex in between. Called without the mutex held.
template <class F>
void wait_until(Streams& s, F attempt) {
  for (;;) {
    {
      std::lock_guard<std::recursive_mutex> lock(s.mutex);
      if (attempt()) return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Queues `work`; true if it went to the legacy stream, which the caller then
// runs (settle) once it has released the mutex.
bool push(Streams& s, const std::shared_ptr<Queue>& q, std::function<bool()> work) {
  q->pending.push_back(std::move(work));
  ++q->enqueued;
  return q == s.legacy;
}

void settle(Streams& s, bool legacy) {
  if (legacy) wait_until(s, [&] { return run_legacy(s); });
}

}  // namespace

bool is_stream(cudaStream_t stream) {
  Streams& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  return live(s, stream);
}

void enqueue_poll(cudaStream_t stream, std::function<bool()> poll) {
  Streams& s = st();
  bool legacy = false;
  {
    std::lock_guard<std::recursive_mutex> lock(s.mutex);
    if (!live(s, stream)) {
      std::fprintf(stderr, "cuda emulator: work queued on a destroyed or unknown stream\n");
      std::abort();
    }
    legacy = push(s, queue_of(s, stream), std::move(poll));
  }
  settle(s, legacy);
}

void enqueue(cudaStream_t stream, std::function<void()> work) {
  enqueue_poll(stream, [work = std::move(work)] {
    work();
    return true;
  });
}

// One try at what `stream` has queued; false while a poll there is not ready.
static bool try_stream(Streams& s, cudaStream_t stream) {
  if (!live(s, stream)) return true;
  return stream == nullptr ? run_legacy(s) : run_all(*stream->queue);
}

void flush_stream(cudaStream_t stream) {
  Streams& s = st();
  wait_until(s, [&] { return try_stream(s, stream); });
}

void flush_all() {
  Streams& s = st();
  wait_until(s, [&] {
    bool all = true;
    for (CUstream_st* stream : s.streams) all = run_all(*stream->queue) && all;
    return all;
  });
}

}  // namespace cuda_emu

using cuda_emu::st;
using cuda_emu::Streams;
using Lock = std::lock_guard<std::recursive_mutex>;

namespace {
cudaError_t fail(cudaError_t err) {
  cuda_emu::set_last_error(err);
  return err;
}
}  // namespace

cudaError_t cudaDeviceSynchronize() {
  cuda_emu::flush_all();
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  Streams& s = st();
  Lock lock(s.mutex);
  *stream = new CUstream_st{std::make_shared<cuda_emu::Queue>(flags)};
  s.streams.insert(*stream);
  return cudaSuccess;
}
// The driver lets queued work finish after the call returns; here it runs first.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Streams& s = st();
  if (stream == nullptr || !cuda_emu::is_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  cuda_emu::flush_stream(stream);
  Lock lock(s.mutex);
  s.streams.erase(stream);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!cuda_emu::is_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  cuda_emu::flush_stream(stream);
  return cudaSuccess;
}
// The emulated device makes progress only when asked: a query runs what it asks
// about, so a host that polls (the watchdog, stream_order.cpp) sees it finish,
// up to a collective whose peers have not all joined yet.
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Streams& s = st();
  Lock lock(s.mutex);
  if (!cuda_emu::live(s, stream)) return fail(cudaErrorInvalidResourceHandle);
  return cuda_emu::try_stream(s, stream) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (!fn || !cuda_emu::is_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  // A poll: the first time the stream reaches it the function starts on its
  // own thread; the stream goes on once it has returned.
  struct Run {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  auto run = std::make_shared<Run>();
  cuda_emu::enqueue_poll(stream, [run, fn, user_data] {
    if (!run->thread.joinable())
      run->thread = std::thread([run = run.get(), fn, user_data] {
        fn(user_data);
        run->done = true;
      });
    if (!run->done.load()) return false;
    run->thread.join();
    return true;
  });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  Streams& s = st();
  bool legacy = false;
  {
    Lock lock(s.mutex);
    if (!cuda_emu::live(s, stream) || !s.events.count(event)) return fail(cudaErrorInvalidResourceHandle);
    // The wait keeps the record the event holds now, whatever is recorded later.
    std::shared_ptr<cuda_emu::Queue> producer = event->queue;
    if (!producer || producer->done >= event->target) return cudaSuccess;
    const uint64_t target = event->target;
    legacy = cuda_emu::push(s, cuda_emu::queue_of(s, stream),
                            [producer, target] { return cuda_emu::run_until(*producer, target); });
  }
  cuda_emu::settle(s, legacy);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  Streams& s = st();
  Lock lock(s.mutex);
  *event = new CUevent_st{flags, nullptr, 0};
  s.events.insert(*event);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Streams& s = st();
  Lock lock(s.mutex);
  if (!s.events.erase(event)) return fail(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Streams& s = st();
  bool legacy = false;
  {
    Lock lock(s.mutex);
    if (!s.events.count(event) || !cuda_emu::live(s, stream)) return fail(cudaErrorInvalidResourceHandle);
    auto stamp = std::make_shared<cuda_emu::Stamp>();
    event->stamp = stamp;
    event->queue = cuda_emu::queue_of(s, stream);
    event->target = event->queue->enqueued + 1;
    legacy = cuda_emu::push(s, event->queue, [stamp] {
      stamp->ran = true;
      stamp->when = std::chrono::steady_clock::now();
      return true;
    });
  }
  cuda_emu::settle(s, legacy);
  return cudaSuccess;
}
namespace {
// One try at what the event's record waits for: the event may be destroyed
// between the tries of a synchronize, so each try looks it up again.
cudaError_t try_event(Streams& s, cudaEvent_t event) {
  if (!s.events.count(event)) return cudaErrorInvalidResourceHandle;
  if (!event->queue) return cudaSuccess;
  return cuda_emu::run_until(*event->queue, event->target) ? cudaSuccess : cudaErrorNotReady;
}
}  // namespace
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Streams& s = st();
  cudaError_t rc = cudaSuccess;
  cuda_emu::wait_until(s, [&] { return (rc = try_event(s, event)) != cudaErrorNotReady; });
  return rc == cudaSuccess ? rc : fail(rc);
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  Streams& s = st();
  Lock lock(s.mutex);
  const cudaError_t rc = try_event(s, event);
  return rc == cudaErrorInvalidResourceHandle ? fail(rc) : rc;
}
// As the driver: both events must have completed (cudaErrorNotReady if either
// is still queued), so a timing read before its synchronize is caught.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Streams& s = st();
  Lock lock(s.mutex);
  if (!s.events.count(start) || !s.events.count(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!start->queue || !end->queue) return fail(cudaErrorInvalidResourceHandle);
  if (!start->stamp->ran || !end->stamp->ran) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->stamp->when - start->stamp->when).count();
  return cudaSuccess;
}
