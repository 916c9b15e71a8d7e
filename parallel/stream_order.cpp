// Compute/communication stream ordering on GPU ranks (see stream_order.h).
#include "parallel/stream_order.h"

#include "kernels/error.h"
#include "parallel/nccl_communicator.h"

#if TRAINER_NCCL
#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "kernels/cuda/cuda_state.h"
#include "parallel/watchdog.h"
#endif

namespace trainer::parallel {

#if TRAINER_NCCL
namespace {

void check_cuda(cudaError_t rc, const char* what) {
  TRAINER_CHECK(rc == cudaSuccess, "{}: {}", what, cudaGetErrorString(rc));
}

bool gpu(const Context& ctx) { return ctx.device == Device::cuda && ctx.cuda != nullptr; }

void poll(cudaEvent_t ev, const char* what) {
  // Spin briefly (a step's scalars are usually ready), then sleep between polls.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  while (true) {
    const cudaError_t rc = cudaEventQuery(ev);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) park_if_watchdog_fired();
    TRAINER_CHECK(rc == cudaErrorNotReady, "{}: {}", what, cudaGetErrorString(rc));
    if (std::chrono::steady_clock::now() < spin_until)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

void bind_compute_stream(Communicator& comm, Context& ctx) {
  if (gpu(ctx)) nccl_set_stream(comm, ctx.cuda->stream);
}

void unbind_compute_stream(Communicator& comm) { nccl_set_stream(comm, nullptr); }

CommStreamOverlap::CommStreamOverlap(Context& ctx, std::vector<Communicator*> comms, int fences)
    : ctx_(ctx), comms_(std::move(comms)), active_(gpu(ctx)) {
  for (Communicator* c : comms_) active_ = active_ && is_nccl(*c);
  if (!active_) return;
  for (int i = 0; i < fences; ++i) {
    cudaEvent_t ev = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
               "CommStreamOverlap: cudaEventCreate");
    events_.push_back(ev);
  }
}

CommStreamOverlap::~CommStreamOverlap() {
  for (void* ev : events_) cudaEventDestroy(static_cast<cudaEvent_t>(ev));
}

void CommStreamOverlap::begin() {
  if (!active_) return;
  cuda::comm_wait_for_compute(*ctx_.cuda);
  for (Communicator* c : comms_) nccl_set_stream(*c, ctx_.cuda->comm_stream);
}

void CommStreamOverlap::to_compute_stream() {
  for (Communicator* c : comms_) nccl_set_stream(*c, ctx_.cuda->stream);
}

void CommStreamOverlap::end(int fence) {
  if (!active_) return;
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(events_.at(fence)), ctx_.cuda->comm_stream),
             "CommStreamOverlap: cudaEventRecord");
  to_compute_stream();
}

void CommStreamOverlap::wait(int fence) {
  if (!active_) return;
  check_cuda(cudaStreamWaitEvent(ctx_.cuda->stream, static_cast<cudaEvent_t>(events_.at(fence)), 0),
             "CommStreamOverlap: cudaStreamWaitEvent");
}

void CommStreamOverlap::join() {
  if (!active_) return;
  cuda::compute_wait_for_comm(*ctx_.cuda);
  to_compute_stream();
}

void wait_for_device(Context& ctx) {
  if (!gpu(ctx)) return;
  CudaState& st = *ctx.cuda;
  // The state's two events: re-recording them is safe (a stream wait already
  // queued keeps the record it saw).
  check_cuda(cudaEventRecord(st.compute_done, st.stream), "wait_for_device: cudaEventRecord");
  check_cuda(cudaEventRecord(st.comm_done, st.comm_stream), "wait_for_device: cudaEventRecord");
  poll(st.compute_done, "wait_for_device (compute stream)");
  poll(st.comm_done, "wait_for_device (communication stream)");
}

#else  // no NCCL: no GPU rank has a communicator whose stream could be chosen

void bind_compute_stream(Communicator&, Context&) {}
void unbind_compute_stream(Communicator&) {}
CommStreamOverlap::CommStreamOverlap(Context& ctx, std::vector<Communicator*> comms, int)
    : ctx_(ctx), comms_(std::move(comms)) {}
CommStreamOverlap::~CommStreamOverlap() = default;
void CommStreamOverlap::begin() {}
void CommStreamOverlap::end(int) {}
void CommStreamOverlap::wait(int) {}
void CommStreamOverlap::join() {}
void CommStreamOverlap::to_compute_stream() {}
void wait_for_device(Context&) {}

#endif

}  // namespace trainer::parallel
