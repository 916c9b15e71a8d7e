// The CUDA-side checks: CUDA_CHECK, CUBLAS_CHECK, NCCL_CHECK, CUDNN_CHECK and
// CUDA_LAUNCH_CHECK, each throwing trainer::Error with the failed expression,
// the library's message, file:line and rank (see kernels/error.h). NCCL_CHECK and
// CUDNN_CHECK expand to calls of ncclGetErrorString / cudnnGetErrorString, so the
// file using them includes nccl.h / cudnn.h itself; this header only needs cudart.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/error.h"

namespace trainer::cuda_detail {
[[noreturn]] inline void fail(const char* lib, const char* expr, const char* file, int line,
                              int code, const char* message) {
  throw_check_failure(expr, file, line,
                      fmt::format("{} error {}: {}", lib, code, message ? message : "?"));
}
}  // namespace trainer::cuda_detail

#define CUDA_CHECK(expr)                                                                   \
  do {                                                                                     \
    cudaError_t trainer_err_ = (expr);                                                     \
    if (trainer_err_ != cudaSuccess)                                                       \
      ::trainer::cuda_detail::fail("CUDA", #expr, __FILE__, __LINE__,                      \
                                   static_cast<int>(trainer_err_),                         \
                                   cudaGetErrorString(trainer_err_));                      \
  } while (0)

// After every kernel launch: a bad configuration is otherwise silent.
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

// cublasLtGetStatusString comes from cublasLt.h (or cublas_api.h as cublasGetStatusString).
#define CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                     \
    cublasStatus_t trainer_st_ = (expr);                                                   \
    if (trainer_st_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::trainer::cuda_detail::fail("cuBLAS", #expr, __FILE__, __LINE__,                    \
                                   static_cast<int>(trainer_st_),                          \
                                   cublasLtGetStatusString(trainer_st_));                  \
  } while (0)

#define NCCL_CHECK(expr)                                                                   \
  do {                                                                                     \
    ncclResult_t trainer_nr_ = (expr);                                                     \
    if (trainer_nr_ != ncclSuccess && trainer_nr_ != ncclInProgress)                       \
      ::trainer::cuda_detail::fail("NCCL", #expr, __FILE__, __LINE__,                      \
                                   static_cast<int>(trainer_nr_),                          \
                                   ncclGetErrorString(trainer_nr_));                       \
  } while (0)

#define CUDNN_CHECK(expr)                                                                  \
  do {                                                                                     \
    cudnnStatus_t trainer_cs_ = (expr);                                                    \
    if (trainer_cs_ != CUDNN_STATUS_SUCCESS)                                               \
      ::trainer::cuda_detail::fail("cuDNN", #expr, __FILE__, __LINE__,                     \
                                   static_cast<int>(trainer_cs_),                          \
                                   cudnnGetErrorString(trainer_cs_));                      \
  } while (0)
