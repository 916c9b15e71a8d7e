// See batch_upload.h.
#include "kernels/batch_upload.h"

#include <cstring>

#include "kernels/memory.h"

namespace trainer {

BatchUploader::BatchUploader(Context& ctx, size_t slot_bytes) : ctx_(ctx), slot_bytes_(slot_bytes) {
#ifdef TRAINER_CUDA
  if (ctx_.device == Device::cuda) {
    for (int s = 0; s < kSlots; ++s) {
      host_[s] = cuda::host_alloc_pinned(slot_bytes_ > 0 ? slot_bytes_ : 1);
      done_[s] = cuda::event_create();
    }
  }
#endif
}

BatchUploader::~BatchUploader() {
#ifdef TRAINER_CUDA
  for (int s = 0; s < kSlots; ++s) {
    // A copy still queued reads its slot: let it finish before the memory goes.
    if (done_[s]) {
      cuda::event_synchronize(done_[s]);
      cuda::event_destroy(done_[s]);
    }
    if (host_[s]) cuda::host_free_pinned(host_[s]);
  }
#endif
}

void BatchUploader::upload(std::span<const Part> parts) {
  size_t total = 0;
  for (const Part& p : parts) total += p.dst.nbytes();
  TRAINER_CHECK(total <= slot_bytes_, "batch upload of {} bytes, slots hold {}", total, slot_bytes_);
  if (ctx_.device != Device::cuda) {
    for (const Part& p : parts) copy_from_host(p.dst, p.src);
    return;
  }
#ifdef TRAINER_CUDA
  const int s = next_;
  next_ = (next_ + 1) % kSlots;
  cuda::event_synchronize(done_[s]);  // the copies this slot fed last time have run
  char* staged = static_cast<char*>(host_[s]);
  for (const Part& p : parts) {
    TRAINER_CHECK(p.dst.device == Device::cuda && p.dst.contiguous(), "batch upload into {}",
                  p.dst.str());
    std::memcpy(staged, p.src, p.dst.nbytes());
    cuda::copy_from_pinned_async(*ctx_.cuda, p.dst.data, staged, p.dst.nbytes());
    staged += p.dst.nbytes();
  }
  cuda::event_record(*ctx_.cuda, done_[s]);
#endif
}

}  // namespace trainer
