// Device memory: the arenas of the memory plan are the only large allocations,
// made through these calls (CPU: aligned host memory; CUDA: cudaMalloc).
#pragma once

#include <cstddef>

#include "kernels/context.h"
#include "kernels/tensor.h"

namespace trainer {

constexpr size_t kArenaAlignment = 256;  // cuBLASLt and 16-byte vector loads want this

void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* ptr);
// Copies between host memory and a tensor's memory (either device), synchronously.
void copy_to_host(void* dst, const Tensor& src);
void copy_from_host(const Tensor& dst, const void* src);
// Waits until every op queued on ctx's streams has finished (no-op on the CPU,
// whose ops have when they return).
void synchronize_device(const Context& ctx);

// What a rank holds now, for the step log. On the GPU: device memory in use
// (cudaMemGetInfo's total - free, as nvidia-smi shows it: the CUDA context,
// NCCL's buffers and any other process on the device count; it does not wait
// for the device). On the CPU: this process's resident set (/proc/self/statm)
// of the machine's physical memory. Zeros where the system will not say.
struct MemoryInUse {
  size_t used = 0, total = 0;
};
MemoryInUse memory_in_use(Device device);

// Host memory that copies from `device` fill again and again (checkpoint.async's
// snapshot): page-locked on the CUDA backend (cudaMallocHost), so a
// device-to-host copy is one DMA instead of passing through the driver's
// pageable staging at about half the speed; aligned host memory on the CPU
// backend. Allocating page-locked memory is slow, so it is kept and reused.
class HostStaging {
 public:
  explicit HostStaging(Device device) : device_(device) {}
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  // At least `bytes` (256-byte aligned), keeping the buffer when it is large
  // enough; earlier contents are not kept when it grows.
  void* reserve(size_t bytes);

 private:
  void release();
  Device device_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

namespace cuda {
// Implemented in kernels/cuda/ (CUDA builds only).
void* device_alloc(size_t bytes);
void device_free(void* ptr);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_from_host(void* dst, const void* src, size_t bytes);
void* host_alloc_pinned(size_t bytes);  // cudaMallocHost
void host_free_pinned(void* ptr);
bool available();  // a usable GPU is visible
void synchronize(CudaState& state);  // kernels/cuda/cuda_state.h
void mem_get_info(size_t* free, size_t* total);  // of the current device
}  // namespace cuda

}  // namespace trainer
