// Where a GPU rank's collectives run relative to its compute stream. Every
// NCCL communicator of a GPU rank enqueues on the compute stream
// (bind_compute_stream): a collective then sees the ops queued before it and
// the ops after it see its result, as on the CPU, with no events. Gradient
// buckets and ZeRO-2/3's per-block collectives are the exception: they go to
// the communication stream (CommStreamOverlap) so they overlap compute. On the CPU, and
// for communicators that are not NCCL, every call here is a no-op.
#pragma once

#include <vector>

#include "kernels/context.h"
#include "parallel/communicator.h"

namespace trainer::parallel {

// comm's later calls go to ctx's compute stream; unbind: back to comm's own
// stream (before the stream is destroyed while comm lives on).
void bind_compute_stream(Communicator& comm, Context& ctx);
void unbind_compute_stream(Communicator& comm);

// Collectives of some communicators moved to ctx's communication stream
// and back, ordered against the compute stream by events: the dp gradient
// buckets (begin before each, join after the last) and ZeRO-2/3's per-block
// reduce-scatters and all-gathers (engine/sharded_params.h), whose batches
// each end in one of `fences` events the compute stream can wait for alone,
// one per shared region. The communication stream runs the batches in the
// order they were issued, so a fence also covers every batch before it.
// Inactive (every call a no-op) unless ctx is a GPU and every communicator
// NCCL (a world of one included).
class CommStreamOverlap {
 public:
  CommStreamOverlap(Context& ctx, std::vector<Communicator*> comms, int fences = 0);
  ~CommStreamOverlap();
  CommStreamOverlap(const CommStreamOverlap&) = delete;
  CommStreamOverlap& operator=(const CommStreamOverlap&) = delete;
  bool active() const { return active_; }
  // The communication stream waits for everything queued on the compute
  // stream so far (the gradients a bucket holds), and the communicators'
  // later calls go to it.
  void begin();
  // Records `fence` after those calls; the communicators go back to the
  // compute stream.
  void end(int fence);
  // The compute stream waits for `fence`'s last record (the host does not).
  void wait(int fence);
  // The compute stream waits for everything issued on the communication
  // stream (the optimizer reads the reduced gradients after it), and the
  // communicators' calls go back to the compute stream. The host does not wait.
  void join();

 private:
  void to_compute_stream();
  Context& ctx_;
  std::vector<Communicator*> comms_;
  std::vector<void*> events_;  // cudaEvent_t
  bool active_ = false;
};

// Blocks the host until ctx's compute and communication streams are idle,
// polling an event instead of cudaStreamSynchronize: a hung collective is
// then ended by the watchdog's abort, never by this thread waiting forever.
void wait_for_device(Context& ctx);

}  // namespace trainer::parallel
