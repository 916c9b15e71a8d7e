// BatchUploader: each micro-batch's inputs (token ids, targets, document
// layout) go to the device without holding it up. copy_from_host waits for
// the whole device twice per copy, so before this the host loaded micro-batch
// i+1 only after micro-batch i's backward had finished and the GPU idled while
// it read, copied and launched again. Here the bytes pass through one of
// kSlots page-locked buffers, taken in turn, and are copied on the compute
// stream behind the work already queued there: the host prepares the next
// micro-batch while the device runs this one. A slot is refilled only once
// the copies it last fed have run (the host waits for its event; on a GPU
// those ran before the micro-batch two uploads back started its forward).
// On the CPU backend an upload is a plain copy.
#pragma once

#include <span>

#include "kernels/context.h"
#include "kernels/tensor.h"

namespace trainer {

class BatchUploader {
 public:
  static constexpr int kSlots = 2;
  // `slot_bytes`: the most one upload carries (its parts together).
  BatchUploader(Context& ctx, size_t slot_bytes);
  ~BatchUploader();
  BatchUploader(const BatchUploader&) = delete;
  BatchUploader& operator=(const BatchUploader&) = delete;

  // dst.nbytes() from src into dst, for every part; src may be reused on return.
  struct Part {
    Tensor dst;
    const void* src;
  };
  void upload(std::span<const Part> parts);

 private:
  Context& ctx_;
  size_t slot_bytes_;
  void* host_[kSlots] = {};   // page-locked on CUDA
  void* done_[kSlots] = {};   // cudaEvent_t recorded after the slot's copies
  int next_ = 0;
};

namespace cuda {
// Implemented in kernels/cuda/ (CUDA builds only); events are cudaEvent_t.
void* event_create();
void event_destroy(void* event);
void event_record(CudaState& state, void* event);  // on the compute stream
void event_synchronize(void* event);
// A copy from page-locked `src` queued on the compute stream.
void copy_from_pinned_async(CudaState& state, void* dst, const void* src, size_t bytes);
}  // namespace cuda

}  // namespace trainer
