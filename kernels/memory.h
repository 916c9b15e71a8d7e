// Device memory: the arenas of the memory plan are the only large allocations,
// made through these calls (CPU: aligned host memory; CUDA: cudaMalloc).
#pragma once

#include <cstddef>

#include "kernels/tensor.h"

namespace trainer {

constexpr size_t kArenaAlignment = 256;  // cuBLASLt and 16-byte vector loads want this

void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* ptr);
// Copies between host memory and a tensor's memory (either device), synchronously.
void copy_to_host(void* dst, const Tensor& src);
void copy_from_host(const Tensor& dst, const void* src);

namespace cuda {
// Implemented in kernels/cuda/ (CUDA builds only).
void* device_alloc(size_t bytes);
void device_free(void* ptr);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_from_host(void* dst, const void* src, size_t bytes);
bool available();  // a usable GPU is visible
}  // namespace cuda

}  // namespace trainer
