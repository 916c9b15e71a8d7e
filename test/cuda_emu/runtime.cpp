// The emulator's runtime API: device memory as tracked host allocations,
// copies and memsets queued in stream order (streams.cpp), launch checks, the
// sticky-free last error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda_profiler_api.h"
#include "cuda_runtime.h"
#include "runtime_state.h"

namespace cuda_emu {
namespace {

// What `nvidia-smi` would show of the emulated device: Hopper's limits, so a
// launch that an H100/H200 refuses is refused here too.
constexpr size_t kTotalMemory = size_t{80} << 30;
constexpr int kSms = 132;
constexpr int kDefaultDynamicSmem = 48 * 1024;
constexpr int kMaxDynamicSmem = 227 * 1024;  // sharedMemPerBlockOptin on sm_90

struct Runtime {
  std::mutex mutex;
  std::map<uintptr_t, size_t> allocations;  // base -> bytes
  size_t allocated = 0;
  std::map<uintptr_t, size_t> pinned;  // cudaMallocHost: base -> bytes
  std::map<const void*, int> max_dynamic_smem;
  int device = 0;
  bool capturing = false;  // between cudaProfilerStart and cudaProfilerStop
  int profiler_starts = 0;
};

Runtime& rt() {
  static Runtime* r = new Runtime();  // never destroyed: frees may come from static destructors
  return *r;
}

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t err) {
  last_error = err;
  return err;
}

bool in_allocation(const Runtime& r, const void* ptr, size_t bytes) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = r.allocations.upper_bound(p);
  if (it == r.allocations.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second && p + bytes >= p;
}

}  // namespace

void set_last_error(cudaError_t err) { last_error = err; }

bool is_device_range(const void* ptr, size_t bytes) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  return in_allocation(r, ptr, bytes == 0 ? 1 : bytes);
}

void require_device_range(const void* ptr, size_t bytes, const char* what) {
  if (bytes == 0 || is_device_range(ptr, bytes)) return;
  std::fprintf(stderr,
               "cuda emulator: %s: [%p, +%zu bytes) is not inside one live cudaMalloc "
               "allocation\n",
               what, ptr, bytes);
  std::fflush(stderr);
  std::abort();
}

// Page-locked host memory: async copies read or write it when they run, as
// DMA does; pageable memory is staged when the copy is queued.
bool is_pinned(const void* ptr, size_t bytes) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = r.pinned.upper_bound(p);
  if (it == r.pinned.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

cudaError_t check_launch(const void* kernel, const LaunchConfig& cfg) {
  const dim3 b = cfg.block, g = cfg.grid;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
    return cudaErrorInvalidConfiguration;
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
    return cudaErrorInvalidConfiguration;
  if (!is_stream(cfg.stream)) return cudaErrorInvalidResourceHandle;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.max_dynamic_smem.find(kernel);
  const int limit = it == r.max_dynamic_smem.end() ? kDefaultDynamicSmem : it->second;
  if (cfg.smem > static_cast<size_t>(limit)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace cuda_emu

using cuda_emu::fail;
using cuda_emu::rt;

namespace {
// Every process emulates its own GPUs; several ranks on one node (the emulated
// NCCL, nccl.cpp) each take the one their local rank names, so the count comes
// from TRAINER_CUDA_EMU_DEVICES (default 1, at most 64).
int device_count() {
  static const int n = [] {
    const char* v = std::getenv("TRAINER_CUDA_EMU_DEVICES");
    const int parsed = v ? std::atoi(v) : 1;
    return parsed >= 1 && parsed <= 64 ? parsed : 1;
  }();
  return n;
}
bool valid_device(int device) { return device >= 0 && device < device_count(); }
}  // namespace

cudaError_t cudaProfilerStart() {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.capturing) return fail(cudaErrorInvalidValue);
  r.capturing = true;
  ++r.profiler_starts;
  return cudaSuccess;
}
cudaError_t cudaProfilerStop() {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.capturing) return fail(cudaErrorInvalidValue);
  r.capturing = false;
  return cudaSuccess;
}
int cuda_emu_profiler_starts() {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.profiler_starts;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  rt().device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = rt().device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "trainer CUDA emulator (host fibers, sm_90 limits)");
  prop->totalGlobalMem = cuda_emu::kTotalMemory;
  prop->sharedMemPerBlock = cuda_emu::kDefaultDynamicSmem;
  prop->sharedMemPerBlockOptin = cuda_emu::kMaxDynamicSmem;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024, prop->maxThreadsDim[1] = 1024, prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff, prop->maxGridSize[1] = 65535, prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = cuda_emu::kSms;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = cuda_emu::kDefaultDynamicSmem; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = cuda_emu::kSms; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = cuda_emu::kMaxDynamicSmem; return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  *total = cuda_emu::kTotalMemory;
  *free = cuda_emu::kTotalMemory - std::min(r.allocated, cuda_emu::kTotalMemory);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = cuda_emu::last_error;
  cuda_emu::last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return cuda_emu::last_error; }
namespace {
struct ErrorText {
  cudaError_t error;
  const char* name;
  const char* text;
};
// The driver's names and messages for the errors the emulator returns.
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
};
const ErrorText* error_text(cudaError_t error) {
  for (const ErrorText& e : kErrors)
    if (e.error == error) return &e;
  return nullptr;
}
}  // namespace

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* e = error_text(error);
  return e ? e->name : "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* e = error_text(error);
  return e ? e->text : "unknown error";
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  auto& r = rt();
  const size_t rounded = (bytes + 255) / 256 * 256;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.allocated + rounded > cuda_emu::kTotalMemory) return fail(cudaErrorMemoryAllocation);
  }
  // Exactly `bytes`, not the 256-byte rounding the driver's allocator grants:
  // under AddressSanitizer the block's redzone then starts at the first byte
  // past the request, so a kernel reading or writing there is reported.
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, bytes);  // NaN in fp32, bf16, fp16 and both fp8 formats
  std::lock_guard<std::mutex> lock(r.mutex);
  r.allocations[reinterpret_cast<uintptr_t>(p)] = bytes;
  r.allocated += rounded;
  *ptr = p;
  return cudaSuccess;
}
// cudaFree and cudaFreeHost synchronize the device first, as the driver's do.
cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  cuda_emu::flush_all();
  auto& r = rt();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.allocations.end()) return fail(cudaErrorInvalidValue);
    r.allocated -= (it->second + 255) / 256 * 256;
    r.allocations.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (posix_memalign(ptr, 256, bytes == 0 ? 1 : bytes) != 0) return fail(cudaErrorMemoryAllocation);
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pinned[reinterpret_cast<uintptr_t>(*ptr)] = bytes == 0 ? 1 : bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  cuda_emu::flush_all();
  {
    auto& r = rt();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.pinned.erase(reinterpret_cast<uintptr_t>(ptr))) return fail(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

namespace {
// An explicit direction must match where the pointers are, as the driver checks
// with unified addressing.
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const bool dst_dev = cuda_emu::is_device_range(dst, bytes);
  const bool src_dev = cuda_emu::is_device_range(src, bytes);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dst_dev) return cudaErrorInvalidValue;
      return cudaSuccess;
    case cudaMemcpyDeviceToHost:
      if (!src_dev) return cudaErrorInvalidValue;
      return cudaSuccess;
    case cudaMemcpyDeviceToDevice:
      if (!dst_dev || !src_dev) return cudaErrorInvalidValue;
      return cudaSuccess;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      return cudaSuccess;
  }
  return cudaErrorInvalidMemcpyDirection;
}
}  // namespace

// The legacy stream's copy: runs now, after the blocking streams' queued work.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const cudaError_t e = check_copy(dst, src, bytes, kind);
  if (e != cudaSuccess) return fail(e);
  cuda_emu::enqueue(nullptr, [=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
// As the driver: device-to-device copies and those from or to page-locked
// memory run in stream order; a pageable source is staged now (the caller may
// reuse it on return); a pageable destination is written before the call
// returns, after the stream's queued work.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (!cuda_emu::is_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  const cudaError_t e = check_copy(dst, src, bytes, kind);
  if (e != cudaSuccess) return fail(e);
  const bool src_host = !cuda_emu::is_device_range(src, bytes);
  const bool dst_host = !cuda_emu::is_device_range(dst, bytes);
  if (dst_host && !cuda_emu::is_pinned(dst, bytes)) {
    cuda_emu::flush_stream(stream);
    std::memmove(dst, src, bytes);
  } else if (src_host && !cuda_emu::is_pinned(src, bytes)) {
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    cuda_emu::enqueue(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  } else {
    cuda_emu::enqueue(stream, [=] { std::memmove(dst, src, bytes); });
  }
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) { return cudaMemsetAsync(dst, value, bytes, nullptr); }
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (!cuda_emu::is_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  if (!cuda_emu::is_device_range(dst, bytes)) return fail(cudaErrorInvalidValue);
  cuda_emu::enqueue(stream, [=] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

cudaError_t cuda_emu_func_set_attribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || value > cuda_emu::kMaxDynamicSmem) return fail(cudaErrorInvalidValue);
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.max_dynamic_smem[func] = value;
  return cudaSuccess;
}
