// Linear layer forward and backward through cuBLASLt (kernels/linear.h), using the
// row-major mapping of gemm.h: forward with the BIAS epilogue, dW with beta = 1
// (accumulate) and the bias gradient from the BGRADB epilogue, which overwrites,
// so it lands in scratch and is added to dbias here. When cuBLASLt has no
// algorithm for an epilogue, a plain GEMM plus a small kernel does the same.
// Operands fp32, bf16 or fp16 (all three of one dtype); the model passes a bias
// in their dtype (its compute copy), which the BIAS epilogue reads. An fp32 bias
// with a 16-bit output (the op API allows it; cuBLASLt's bias has D's type)
// makes the GEMM write fp32 scratch and one kernel add the bias and round: one
// rounding per output, as on the CPU (the epilogue fallback does the same).
#include "kernels/cuda/bias_add.cuh"
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/linear_common.cuh"
#include "kernels/cuda/staged_gemm.cuh"
#include "kernels/linear.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

__global__ void add_vector_kernel(float* out, const float* a, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] += a[i];
}

template <class T>
struct Column {  // dout[m, n]
  const T* dout;
  int64_t N;
  __device__ float operator()(int64_t m, int64_t n) const { return to_float(dout[m * N + n]); }
};

}  // namespace

void linear_forward(Context& ctx, Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const char* op = "linear_forward";
  CudaState& st = state_of(ctx);
  const LinearDims d = check_linear_dims(op, inp, weight, out);
  check_linear_bias(op, bias, d.N, out.dtype);
  if (d.M == 0 || d.N == 0) return;
  GemmArgs g = linear_forward_gemm(inp, weight, d);
  g.c = {out.data, out.dtype, d.N, 0};
  if (bias.empty()) {
    gemm(st, g);
    return;
  }
  if (bias.dtype == out.dtype) {
    GemmArgs gb = g;
    gb.epilogue = GemmEpilogue::bias;
    gb.bias = bias.data;
    if (try_gemm(st, gb)) return;
  }
  // The bias by a kernel after the GEMM: a 16-bit output is staged in fp32, so it
  // is rounded once, after the bias is added (the CPU op's arithmetic).
  float* fp32_out = out.dtype == DType::f32 ? static_cast<float*>(out.data) : nullptr;
  staged_gemm(st, g, fp32_out, op, [&](const float* acc, int64_t m0, int64_t rows) {
    TRAINER_FLOAT_DISPATCH(out.dtype, op,
                           TRAINER_PARAM_DISPATCH(bias.dtype, out.dtype, op, "bias", {
                             add_bias(st, static_cast<T*>(out.data) + m0 * d.N, acc,
                                      static_cast<const W*>(bias.data), rows, d.N);
                           }));
  });
}

void linear_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                     Tensor inp, Tensor weight) {
  const char* op = "linear_backward";
  CudaState& st = state_of(ctx);
  const LinearDims d = check_linear_dims(op, inp, weight, dout);
  check_cuda(dweight, op, "dweight");
  TRAINER_CHECK(dweight.ndim == 2 && dweight.shape[0] == d.N && dweight.shape[1] == d.K &&
                    (dweight.dtype == DType::f32 || dweight.dtype == inp.dtype),
                "{}: dweight {} is not ({}, {}) fp32 or {}", op, dweight.str(), d.N, d.K,
                dtype_name(inp.dtype));
  if (!dinp.empty()) {
    check_cuda(dinp, op, "dinp");
    TRAINER_CHECK(dinp.numel() == inp.numel() && dinp.size(-1) == d.K && dinp.dtype == inp.dtype,
                  "{}: dinp {} vs inp {}", op, dinp.str(), inp.str());
  }
  if (!dbias.empty()) {
    check_cuda(dbias, op, "dbias");
    check_dtype(dbias, DType::f32, op, "dbias");
    TRAINER_CHECK(dbias.numel() == d.N, "{}: dbias {} is not ({})", op, dbias.str(), d.N);
  }
  if (d.M == 0) return;
  if (d.N == 0) {  // an empty product: dinp is zero, the weight and bias get nothing
    if (!dinp.empty()) CUDA_CHECK(cudaMemsetAsync(dinp.data, 0, dinp.nbytes(), st.stream));
    return;
  }

  if (!dinp.empty()) {  // dinp (M, K) = dout (M, N) @ weight (N, K)
    GemmArgs g = linear_dinp_gemm(dout, weight, d);
    g.c = {dinp.data, dinp.dtype, d.K, 0};
    gemm(st, g);
  }

  // dweight (N, K) += dout^T (N, M) @ inp (M, K)
  GemmArgs g;
  g.a = {dout.data, dout.dtype, d.N, 0};
  g.trans_a = true;
  g.b = {inp.data, inp.dtype, d.K, 0};
  g.c = {dweight.data, dweight.dtype, d.K, 0};
  g.m = d.N;
  g.n = d.K;
  g.k = d.M;
  g.beta = 1.0f;
  bool bias_done = dbias.empty();
  float* bias_tmp = nullptr;
  if (!bias_done && dweight.dtype == DType::f32) {
    // BGRADB writes the bias gradient in C's dtype (fp32 here).
    bias_tmp = static_cast<float*>(scratch(st, linear_bias_grad_scratch_bytes(d.N), op));
    GemmArgs gb = g;
    gb.epilogue = GemmEpilogue::bias_grad_b;
    gb.bias = bias_tmp;
    bias_done = try_gemm(st, gb);
  }
  if (bias_done && bias_tmp) {
    add_vector_kernel<<<grid_for(d.N, 256), 256, 0, st.stream>>>(static_cast<float*>(dbias.data),
                                                                 bias_tmp, d.N);
    CUDA_LAUNCH_CHECK();
    return;
  }
  gemm(st, g);
  if (!bias_done) {  // no BGRADB algorithm for this case: deterministic column sums
    float* partial = static_cast<float*>(scratch(st, column_sums_scratch_bytes(d.M, d.N), op));
    TRAINER_FLOAT_DISPATCH(dout.dtype, op, {
      column_sums(st, Column<T>{static_cast<const T*>(dout.data), d.N}, d.M, d.N, partial,
                  static_cast<float*>(dbias.data), true);
    });
  }
}

}  // namespace trainer::cuda
