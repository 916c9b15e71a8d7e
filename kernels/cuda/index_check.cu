// find_out_of_range (index_check.h): every element checked in parallel; the
// first offender wins an atomicMin on (flat index << 32 | value), so the report
// names the element the CPU op's row-major loop names.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/index_check.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNone = ~0ull;

__global__ void out_of_range_kernel(const int32_t* data, int64_t rows, int64_t cols, int64_t ld,
                                    int64_t hi, int64_t slope, unsigned long long* first) {
  const int64_t n = rows * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int32_t v = data[r * ld + c];
    if (v < 0 || v > hi + slope * c)
      atomicMin(first, (static_cast<unsigned long long>(i) << 32) | static_cast<uint32_t>(v));
  }
}

}  // namespace

OutOfRange find_out_of_range(CudaState& st, const int32_t* data, int64_t rows, int64_t cols,
                             int64_t ld, int64_t hi, int64_t slope, const char* op) {
  OutOfRange result;
  const int64_t n = rows * cols;
  if (n == 0) return result;
  TRAINER_CHECK(n < (int64_t{1} << 32), "{}: {} indices exceed the 32-bit record", op, n);
  auto* first = static_cast<unsigned long long*>(scratch(st, index_check_scratch_bytes(), op));
  CUDA_CHECK(cudaMemsetAsync(first, 0xFF, sizeof(*first), st.stream));
  out_of_range_kernel<<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(data, rows, cols, ld,
                                                                          hi, slope, first);
  CUDA_LAUNCH_CHECK();
  unsigned long long record = kNone;
  CUDA_CHECK(cudaMemcpyAsync(&record, first, sizeof(record), cudaMemcpyDeviceToHost, st.stream));
  CUDA_CHECK(cudaStreamSynchronize(st.stream));
  if (record == kNone) return result;
  const int64_t i = static_cast<int64_t>(record >> 32);
  result.found = true;
  result.row = i / cols, result.col = i % cols;
  result.value = static_cast<int32_t>(static_cast<uint32_t>(record & 0xFFFFFFFFu));
  return result;
}

}  // namespace trainer::cuda
