// Host side of kernels/memory.h; CUDA builds route Device::cuda to kernels/cuda.
#include "kernels/memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
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

void synchronize_device(const Context& ctx) {
#ifdef TRAINER_CUDA
  if (ctx.device == Device::cuda && ctx.cuda) cuda::synchronize(*ctx.cuda);
#else
  (void)ctx;
#endif
}

MemoryInUse memory_in_use(Device device) {
  MemoryInUse m;
  if (device == Device::cuda) {
#ifdef TRAINER_CUDA
    size_t free = 0;
    cuda::mem_get_info(&free, &m.total);
    m.used = m.total - std::min(free, m.total);
#endif
    return m;
  }
  const long page = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_PHYS_PAGES);
  if (page > 0 && pages > 0) m.total = size_t(page) * size_t(pages);
  // statm: size, resident, ... in pages.
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long size = 0, resident = 0;
    if (std::fscanf(f, "%lu %lu", &size, &resident) == 2 && page > 0) m.used = resident * size_t(page);
    std::fclose(f);
  }
  return m;
}

HostStaging::~HostStaging() { release(); }

void HostStaging::release() {
  void* p = ptr_;
  ptr_ = nullptr;
  bytes_ = 0;
  if (!p) return;
#ifdef TRAINER_CUDA
  if (device_ == Device::cuda) {
    cuda::host_free_pinned(p);
    return;
  }
#endif
  std::free(p);
}

void* HostStaging::reserve(size_t bytes) {
  if (bytes <= bytes_ && ptr_) return ptr_;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kArenaAlignment - 1) / kArenaAlignment *
                         kArenaAlignment;
  release();  // before the larger one is taken: the two together may not fit
  void* p = nullptr;
  if (device_ == Device::cuda) {
#ifdef TRAINER_CUDA
    p = cuda::host_alloc_pinned(rounded);
#else
    TRAINER_CHECK(false, "this build has no CUDA backend");
#endif
  } else {
    p = std::aligned_alloc(kArenaAlignment, rounded);
    TRAINER_CHECK(p != nullptr, "cannot allocate {} bytes of host memory", rounded);
  }
  ptr_ = p;
  bytes_ = rounded;
  return ptr_;
}

}  // namespace trainer
