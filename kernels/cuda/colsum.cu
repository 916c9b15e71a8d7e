// Pass 2 of the deterministic column sums (colsum.cuh).
#include "kernels/cuda/colsum.cuh"

namespace trainer::cuda {

__global__ void column_finish_kernel(const float* partial, int64_t num_chunks, int64_t num_cols,
                                     float* out, bool accumulate) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < num_cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t j = 0; j < num_chunks; ++j) s += partial[j * num_cols + c];
    out[c] = accumulate ? out[c] + s : s;
  }
}

}  // namespace trainer::cuda
