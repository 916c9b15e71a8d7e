// CudaState: what a Context{Device::cuda, state} carries for every CUDA op: the
// device, a compute stream and a communication stream (both non-blocking, ordered
// by the events below), the cuBLASLt handle with its 32 MiB workspace, a grow-only
// scratch buffer for op temporaries and the cuBLASLt algorithm cache.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "kernels/op_scratch.h"

namespace trainer {

struct GemmAlgoCache;  // kernels/cuda/gemm.cpp

struct CudaState {
  static constexpr size_t kWorkspaceBytes = kCublasLtWorkspaceBytes;

  int device_index = 0;
  int num_sms = 0;
  cudaStream_t stream = nullptr;       // every op runs here
  cudaStream_t comm_stream = nullptr;  // collectives run here
  cudaEvent_t compute_done = nullptr;  // recorded by comm_wait_for_compute
  cudaEvent_t comm_done = nullptr;     // recorded by compute_wait_for_comm
  cublasLtHandle_t cublaslt = nullptr;
  void* workspace = nullptr;  // kWorkspaceBytes, 256-byte aligned, used on `stream` only
  // Op temporaries (attention scores, reduction partials), sized by
  // kernels/op_scratch.h. Grows, never shrinks, and growing synchronizes
  // `stream`; the trainer reserves the memory plan's size up front instead
  // (reserve_scratch), after which a larger request is refused.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  bool scratch_fixed = false;  // set by reserve_scratch
  size_t scratch_peak = 0;     // the largest request so far (the plan check reads it)
  // false: fp32 GEMMs use full fp32 (CUBLAS_COMPUTE_32F), as the CPU reference does;
  // true: TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32), ~10 bits of mantissa.
  bool allow_tf32 = false;
  // false: skip cuBLASLt's bias epilogues and take the fallback kernels (the tests
  // use it so both branches of the linear layer are checked).
  bool gemm_epilogues = true;
  // false: 16-bit attention always takes the unfused path (tests compare both;
  // true uses the fused kernels of flash_attention.h where their shapes allow).
  bool flash_attention = true;
  // The largest fp32 staging block of a GEMM finished by a kernel (op_scratch.h,
  // kStagingBlockBytes); the tests lower it so those GEMMs run in several blocks.
  size_t staging_block_bytes = kStagingBlockBytes;
  // true: ops check the integer operands the CPU ops refuse out of range
  // (attention's doc_start, the embedding's learned positions, moe_plan's
  // experts) with a kernel and a stream sync per call (index_check.h). The
  // engine turns it off: its operands come from document_layout
  // (engine/documents.h) and the router, in range by construction, and a sync
  // per layer would stall the launch queue.
  bool check_index_operands = true;
  GemmAlgoCache* gemm_cache = nullptr;
};

// Selects the device (cudaSetDevice) and creates streams, events, handle, workspace.
CudaState* create_cuda_state(int device_index);
// Synchronizes and releases everything; null is a no-op.
void destroy_cuda_state(CudaState* state);

namespace cuda {
// A pointer to at least `bytes` of device scratch for `op`, valid until the next call
// (stream-ordered: ops on state.stream may use it in turn). 256-byte aligned.
void* scratch(CudaState& state, size_t bytes, const char* op);
// Allocates `bytes` of scratch now (the memory plan's op scratch) and fixes it:
// a later request above it throws, naming the op and the bytes, so a plan that
// misses an op fails loudly instead of growing (and synchronizing) silently.
void reserve_scratch(CudaState& state, size_t bytes);
// The comm stream waits for all work queued so far on the compute stream.
void comm_wait_for_compute(CudaState& state);
// The compute stream waits for all work queued so far on the comm stream.
void compute_wait_for_comm(CudaState& state);
// Blocks the host until both streams are idle.
void synchronize(CudaState& state);
}  // namespace cuda

}  // namespace trainer
