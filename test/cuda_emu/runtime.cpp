// The emulator's runtime API: device memory as tracked host allocations,
// synchronous streams and events, launch checks, the sticky-free last error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "cuda_runtime.h"
#include "runtime_state.h"

struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  unsigned flags;
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
};

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
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  std::map<const void*, int> max_dynamic_smem;
  int device = 0;
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

bool live_stream(const Runtime& r, cudaStream_t s) {
  return s == nullptr || r.streams.count(s) != 0;
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

bool is_stream(cudaStream_t stream) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  return live_stream(r, stream);
}

cudaError_t check_launch(const void* kernel, const LaunchConfig& cfg) {
  const dim3 b = cfg.block, g = cfg.grid;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
    return cudaErrorInvalidConfiguration;
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
    return cudaErrorInvalidConfiguration;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!live_stream(r, cfg.stream)) return cudaErrorInvalidResourceHandle;
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
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
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
cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
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
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
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

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const cudaError_t e = check_copy(dst, src, bytes, kind);
  if (e != cudaSuccess) return fail(e);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (!cuda_emu::is_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!cuda_emu::is_device_range(dst, bytes)) return fail(cudaErrorInvalidValue);
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (!cuda_emu::is_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  return cudaMemset(dst, value, bytes);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  *stream = new CUstream_st{flags};
  r.streams.insert(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.streams.erase(stream)) return fail(cudaErrorInvalidResourceHandle);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return cuda_emu::is_stream(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!cuda_emu::live_stream(r, stream) || !r.events.count(event))
    return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  *event = new CUevent_st{flags, false, {}};
  r.events.insert(*event);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.events.erase(event)) return fail(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.events.count(event) || !cuda_emu::live_stream(r, stream))
    return fail(cudaErrorInvalidResourceHandle);
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.events.count(event) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventSynchronize(event); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  auto& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.events.count(start) || !r.events.count(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
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
