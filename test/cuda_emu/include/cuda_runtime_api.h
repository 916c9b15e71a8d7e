// The CUDA emulator's runtime API: the subset of cuda_runtime_api.h that
// trainer uses, run on the host. "Device" memory is host memory from
// cudaMalloc (256-byte aligned, filled with 0xFF bytes: NaN in every float
// format, so a read before a write shows); work queued on a stream runs when
// the host or another stream waits for it (streams.cpp), so a missing event
// or synchronize reads stale bytes. Enum values are CUDA 13.0's, so an error
// printed here reads as on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "library_types.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

constexpr unsigned cudaStreamDefault = 0x00;
constexpr unsigned cudaStreamNonBlocking = 0x01;
constexpr unsigned cudaEventDefault = 0x00;
constexpr unsigned cudaEventBlockingSync = 0x01;
constexpr unsigned cudaEventDisableTiming = 0x02;
constexpr unsigned cudaHostAllocDefault = 0x00;

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct uint3 {
  unsigned x, y, z;
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
  int clockRate;
  int memoryClockRate;
  int memoryBusWidth;
  int pciBusID;
  int pciDeviceID;
  int pciDomainID;
};

#define CUDART_VERSION 13000

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaStreamQuery(cudaStream_t stream);
// A host function in stream order: as the driver, it runs on a thread of its
// own (the emulator's: one per call), so one that blocks holds its stream and
// what waits on it, not the thread that waits; it may not call CUDA.
#define CUDART_CB
typedef void (*cudaHostFn_t)(void* user_data);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// Kernels are plain functions here; the attribute is kept per function so a
// launch above it fails as on a GPU.
cudaError_t cuda_emu_func_set_attribute(const void* func, cudaFuncAttribute attr, int value);
template <class F>
cudaError_t cudaFuncSetAttribute(F* func, cudaFuncAttribute attr, int value) {
  return cuda_emu_func_set_attribute(reinterpret_cast<const void*>(func), attr, value);
}

namespace cuda_emu {
// For the emulated libraries (cuBLASLt, cub): is [ptr, ptr + bytes) inside one
// live cudaMalloc allocation? Reports what it is not and aborts.
void require_device_range(const void* ptr, size_t bytes, const char* what);
bool is_device_range(const void* ptr, size_t bytes);
bool is_stream(cudaStream_t stream);
// Stream order (streams.cpp): `work` runs when the host or another stream
// waits for it, or at once on the legacy stream (nullptr). The emulated
// libraries queue what they compute, as the real ones launch kernels.
void enqueue(cudaStream_t stream, std::function<void()> work);
// A task that may not be ready when the stream reaches it (the emulated
// NCCL's landing, once every rank has joined the exchange): `poll` runs each
// time the stream is asked to go on and returns true once it has done its
// work; until then the stream stops there (a query answers cudaErrorNotReady).
void enqueue_poll(cudaStream_t stream, std::function<bool()> poll);
// Runs what `stream` has queued (and what that waits for on other streams),
// retrying a poll that is not ready with the streams' mutex released.
void flush_stream(cudaStream_t stream);
void flush_all();
}  // namespace cuda_emu
