// Whole-tensor sums (of squares, of values), deterministic (kernels/norm.h): a
// fixed number of blocks write double partials, one block adds them in order. Double keeps the
// sum as exact as the CPU's over 10^9 elements.
#include "kernels/cuda/common.cuh"
#include "kernels/norm.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

__device__ double block_sum_double(double v, double* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : 0.0;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <class T, bool kSquare>
__global__ void partial_kernel(double* partial, const T* x, int64_t n) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = to_float(x[i]);
    s += kSquare ? v * v : v;
  }
  s = block_sum_double(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <class Out>
__global__ void finish_kernel(Out* out, const double* partial, int num_partials) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x) s += partial[i];
  s = block_sum_double(s, shared);
  if (threadIdx.x == 0) out[0] = static_cast<Out>(static_cast<double>(out[0]) + s);
}

// out[0] += the sum of x (squared when kSquare), through the partials.
template <bool kSquare, class Out>
void launch_sum(CudaState& st, Out* out, const Tensor& x, const char* op) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(sum_of_squares_blocks(n));
  double* partial = static_cast<double*>(scratch(st, sum_of_squares_scratch_bytes(n), op));
  TRAINER_FLOAT_DISPATCH(x.dtype, op, {
    partial_kernel<T, kSquare>
        <<<blocks, kThreads, 0, st.stream>>>(partial, static_cast<const T*>(x.data), n);
  });
  CUDA_LAUNCH_CHECK();
  finish_kernel<Out><<<1, kThreads, 0, st.stream>>>(out, partial, static_cast<int>(blocks));
  CUDA_LAUNCH_CHECK();
}

// Both sums' argument checks: one `out_dtype` value on the device, x on it too.
CudaState& checked(Context& ctx, const Tensor& out, const Tensor& x, DType out_dtype, const char* op) {
  check_cuda(out, op, "out");
  check_cuda(x, op, "x");
  check_dtype(out, out_dtype, op, "out");
  TRAINER_CHECK(out.numel() == 1, "{}: out {} must hold one value", op, out.str());
  return state_of(ctx);
}

}  // namespace

void sum_of_squares(Context& ctx, Tensor out, Tensor x) {
  const char* op = "sum_of_squares";
  CudaState& st = checked(ctx, out, x, DType::f32, op);
  launch_sum<true>(st, static_cast<float*>(out.data), x, op);
}

void sum_values(Context& ctx, Tensor out, Tensor x) {
  const char* op = "sum_values";
  CudaState& st = checked(ctx, out, x, DType::f64, op);
  launch_sum<false>(st, static_cast<double*>(out.data), x, op);
}

}  // namespace trainer::cuda
