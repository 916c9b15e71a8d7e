// Host side of kernels/memory.h; CUDA builds route Device::cuda to kernels/cuda.
#include "kernels/memory.h"

#include <cstdlib>
#include <cstring>

namespace trainer {

void* device_alloc(Device device, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (device == Device::cuda) {
#ifdef TRAINER_CUDA
    return cuda::device_alloc(bytes);
#else
    TRAINER_CHECK(false, "this build has no CUDA backend");
#endif
  }
  size_t rounded = (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  void* p = std::aligned_alloc(kArenaAlignment, rounded);
  TRAINER_CHECK(p != nullptr, "cannot allocate {} bytes of host memory", bytes);
  return p;
}

void device_free(Device device, void* ptr) {
  if (!ptr) return;
  if (device == Device::cuda) {
#ifdef TRAINER_CUDA
    cuda::device_free(ptr);
#endif
    return;
  }
  std::free(ptr);
}

void copy_to_host(void* dst, const Tensor& src) {
  if (src.device == Device::cuda) {
#ifdef TRAINER_CUDA
    cuda::copy_to_host(dst, src.data, src.nbytes());
    return;
#endif
  }
  std::memcpy(dst, src.data, src.nbytes());
}

void copy_from_host(const Tensor& dst, const void* src) {
  if (dst.device == Device::cuda) {
#ifdef TRAINER_CUDA
    cuda::copy_from_host(dst.data, src, dst.nbytes());
    return;
#endif
  }
  std::memcpy(dst.data, src, dst.nbytes());
}

}  // namespace trainer
