// CudaState lifetime, scratch, stream ordering and kernels/memory.h's cuda:: calls.
#include "kernels/cuda/cuda_state.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/batch_upload.h"
#include "kernels/memory.h"

namespace trainer {

CudaState* create_cuda_state(int device_index) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  TRAINER_CHECK(device_index >= 0 && device_index < count,
                "CUDA device {} requested but {} visible", device_index, count);
  CUDA_CHECK(cudaSetDevice(device_index));
  // On a failure part-way, destroy_cuda_state releases what was created.
  struct Destroy {
    void operator()(CudaState* s) const { destroy_cuda_state(s); }
  };
  std::unique_ptr<CudaState, Destroy> state(new CudaState());
  state->device_index = device_index;
  CUDA_CHECK(cudaDeviceGetAttribute(&state->num_sms, cudaDevAttrMultiProcessorCount,
                                    device_index));
  // Non-blocking: no implicit ordering with the legacy default stream.
  CUDA_CHECK(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&state->comm_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&state->compute_done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&state->comm_done, cudaEventDisableTiming));
  CUBLAS_CHECK(cublasLtCreate(&state->cublaslt));
  CUDA_CHECK(cudaMalloc(&state->workspace, CudaState::kWorkspaceBytes));
  state->gemm_cache = cuda::create_gemm_cache();
  return state.release();
}

void destroy_cuda_state(CudaState* state) {
  if (!state) return;
  // Teardown must not throw: report nothing, release what exists.
  cudaSetDevice(state->device_index);
  if (state->stream) cudaStreamSynchronize(state->stream);
  if (state->comm_stream) cudaStreamSynchronize(state->comm_stream);
  cuda::destroy_gemm_cache(state->gemm_cache);
  if (state->scratch) cudaFree(state->scratch);
  if (state->workspace) cudaFree(state->workspace);
  if (state->cublaslt) cublasLtDestroy(state->cublaslt);
  if (state->compute_done) cudaEventDestroy(state->compute_done);
  if (state->comm_done) cudaEventDestroy(state->comm_done);
  if (state->comm_stream) cudaStreamDestroy(state->comm_stream);
  if (state->stream) cudaStreamDestroy(state->stream);
  delete state;
}

namespace cuda {

namespace {
void grow_scratch(CudaState& state, size_t bytes) {
  // Earlier ops on the stream may still read the old buffer.
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  if (state.scratch) CUDA_CHECK(cudaFree(state.scratch));
  state.scratch = nullptr;
  state.scratch_bytes = 0;
  size_t rounded = (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  CUDA_CHECK(cudaMalloc(&state.scratch, rounded));
  state.scratch_bytes = rounded;
}
}  // namespace

void* scratch(CudaState& state, size_t bytes, const char* op) {
  state.scratch_peak = std::max(state.scratch_peak, bytes);
  if (bytes <= state.scratch_bytes) return state.scratch;
  TRAINER_CHECK(!state.scratch_fixed,
                "{}: asks for {} bytes of CUDA scratch, over the {} the memory plan reserved "
                "(kernels/op_scratch.h and the layers' declare_op_scratch disagree with the op)",
                op, bytes, state.scratch_bytes);
  grow_scratch(state, bytes);
  return state.scratch;
}

void reserve_scratch(CudaState& state, size_t bytes) {
  if (bytes > state.scratch_bytes) grow_scratch(state, bytes);
  state.scratch_fixed = true;
}

void comm_wait_for_compute(CudaState& state) {
  CUDA_CHECK(cudaEventRecord(state.compute_done, state.stream));
  CUDA_CHECK(cudaStreamWaitEvent(state.comm_stream, state.compute_done, 0));
}

void compute_wait_for_comm(CudaState& state) {
  CUDA_CHECK(cudaEventRecord(state.comm_done, state.comm_stream));
  CUDA_CHECK(cudaStreamWaitEvent(state.stream, state.comm_done, 0));
}

void synchronize(CudaState& state) {
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  CUDA_CHECK(cudaStreamSynchronize(state.comm_stream));
}

void mem_get_info(size_t* free, size_t* total) { CUDA_CHECK(cudaMemGetInfo(free, total)); }

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));  // 256-byte aligned by cudaMalloc's contract
  TRAINER_CHECK(reinterpret_cast<uintptr_t>(p) % kArenaAlignment == 0,
                "cudaMalloc returned {} not {}-byte aligned", p, kArenaAlignment);
  return p;
}

void device_free(void* ptr) {
  if (ptr) CUDA_CHECK(cudaFree(ptr));
}

// The memory API carries no stream: these copies order themselves against all
// streams of the device (ops run on non-blocking streams, which cudaMemcpy on the
// legacy stream would not wait for). They serve set-up, checkpoints and metrics.
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  // A pageable-source copy may return before the DMA lands.
  CUDA_CHECK(cudaDeviceSynchronize());
}

// BatchUploader's (kernels/batch_upload.h): its copies run in stream order from
// page-locked memory, which the host refills only after the slot's event.
void copy_from_pinned_async(CudaState& state, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, state.stream));
}

void* event_create() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void event_destroy(void* event) { CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event))); }
void event_record(CudaState& state, void* event) {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), state.stream));
}
// A never-recorded event has nothing to wait for: it returns at once.
void event_synchronize(void* event) { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

void* host_alloc_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    TRAINER_CHECK(false, "cannot allocate {} bytes of page-locked host memory: {}", bytes,
                  cudaGetErrorString(err));
  }
  return p;
}
void host_free_pinned(void* ptr) { CUDA_CHECK(cudaFreeHost(ptr)); }

bool available() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not confused
    return false;
  }
  return count > 0;
}

}  // namespace cuda
}  // namespace trainer
