// Column blocks of per-head rows on the GPU (kernels/head_columns.h): one
// thread per written element; a sum over heads adds them in head order in
// fp32, as the CPU op does.
#include "kernels/cuda/moe_common.cuh"
#include "kernels/head_columns.h"

namespace trainer::cuda {
namespace {

using moe::AnyFloat;

constexpr int kThreads = 256;

__global__ void head_columns_kernel(AnyFloat out, int64_t out_col, int64_t Do, AnyFloat in,
                                    int64_t in_col, int64_t Di, int64_t rows, int64_t out_heads,
                                    int64_t in_heads, int64_t width) {
  const int64_t n = rows * out_heads * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % width, k = (i / width) % out_heads, r = i / (width * out_heads);
    const int64_t dst = (r * out_heads + k) * Do + out_col + j;
    if (out_heads == 1 && in_heads > 1) {
      float sum = 0.0f;
      for (int64_t h = 0; h < in_heads; ++h) sum += in.load((r * in_heads + h) * Di + in_col + j);
      out.store(dst, sum);
    } else {
      out.store(dst, in.load((r * in_heads + (in_heads == 1 ? 0 : k)) * Di + in_col + j));
    }
  }
}

}  // namespace

void copy_head_columns(Context& ctx, Tensor out, int64_t out_col, Tensor in, int64_t in_col,
                       int64_t width) {
  const char* op = "copy_head_columns";
  CudaState& st = state_of(ctx);
  const HeadColumns h = check_head_columns(out, out_col, in, in_col, width);
  moe::check_float_arg(out, op, "out");
  moe::check_float_arg(in, op, "in");
  const int64_t n = h.rows * h.out_heads * width;
  if (n == 0) return;
  head_columns_kernel<<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
      moe::any_float(out, op, "out"), out_col, out.size(2), moe::any_float(in, op, "in"), in_col,
      in.size(2), h.rows, h.out_heads, h.in_heads, width);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
