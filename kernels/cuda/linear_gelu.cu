// Linear + GELU through cuBLASLt's GELU epilogues (kernels/linear_gelu.h), GPT-2's
// MLP: the fc forward as one GEMM with GELU_AUX_BIAS (D = gelu(acc + b), aux =
// acc + b, the pre-activation backward needs), the proj backward's dX GEMM with
// DGELU (D = acc * gelu'(aux)), so neither GELU pass touches memory on its own.
// Where the epilogue cannot run, a plain GEMM into fp32 and one kernel do the
// same arithmetic: cuBLASLt's bias has D's type (the model passes the bias's
// compute copy, but the op takes an fp32 one too); its aux leading dimension
// must be a multiple of 8; and try_gemm may find no algorithm.
#include <algorithm>

#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/linear_common.cuh"
#include "kernels/cuda/staged_gemm.cuh"
#include "kernels/linear.h"
#include "kernels/linear_gelu.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

// pre = acc + bias and act = gelu(acc + bias), each rounded once from fp32; acc may
// alias pre (an fp32 pre-activation is the GEMM's own output).
template <class T, class W>
__global__ void bias_gelu_kernel(T* act, T* pre, const float* acc, const W* bias, int64_t M,
                                 int64_t N) {
  for (int64_t m = blockIdx.y; m < M; m += gridDim.y)
    for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
         n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t i = m * N + n;
      const float v = acc[i] + (bias ? to_float(bias[n]) : 0.0f);
      pre[i] = from_float<T>(v);
      act[i] = from_float<T>(gelu_value(v));
    }
}

// dpre = acc * gelu'(pre), rounded once; acc may alias dpre.
template <class T>
__global__ void dgelu_kernel(T* dpre, const float* acc, const T* pre, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dpre[i] = from_float<T>(acc[i] * gelu_grad(to_float(pre[i])));
}

void check_like(const char* op, const Tensor& t, const Tensor& like, const char* name) {
  check_cuda(t, op, name);
  TRAINER_CHECK(t.dtype == like.dtype && t.numel() == like.numel() && t.size(-1) == like.size(-1),
                "{}: {} {} must have {}'s shape and dtype", op, name, t.str(), like.str());
}

}  // namespace

void linear_gelu_forward(Context& ctx, Tensor act, Tensor pre, Tensor inp, Tensor weight,
                         Tensor bias) {
  const char* op = "linear_gelu_forward";
  CudaState& st = state_of(ctx);
  const LinearDims d = check_linear_dims(op, inp, weight, pre);
  check_like(op, act, pre, "act");
  TRAINER_CHECK(act.data != pre.data, "{}: act {} aliases pre", op, act.str());
  check_linear_bias(op, bias, d.N, pre.dtype);
  if (d.M == 0 || d.N == 0) return;
  GemmArgs g = linear_forward_gemm(inp, weight, d);
  if ((bias.empty() || bias.dtype == pre.dtype) && d.N % 8 == 0) {
    GemmArgs ge = g;
    ge.c = {act.data, act.dtype, d.N, 0};
    ge.epilogue = bias.empty() ? GemmEpilogue::gelu_aux : GemmEpilogue::gelu_aux_bias;
    ge.bias = bias.data;
    ge.aux = pre.data;
    ge.aux_ld = d.N;
    if (try_gemm(st, ge)) return;
  }
  float* fp32_out = pre.dtype == DType::f32 ? static_cast<float*>(pre.data) : nullptr;
  const DType bias_dtype = bias.empty() ? pre.dtype : bias.dtype;
  staged_gemm(st, g, fp32_out, op, [&](const float* acc, int64_t m0, int64_t rows) {
    const dim3 grid(grid_for(d.N, kThreads), static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridY)));
    TRAINER_FLOAT_DISPATCH(pre.dtype, op,
                           TRAINER_PARAM_DISPATCH(bias_dtype, pre.dtype, op, "bias", {
                             bias_gelu_kernel<T, W><<<grid, kThreads, 0, st.stream>>>(
                                 static_cast<T*>(act.data) + m0 * d.N,
                                 static_cast<T*>(pre.data) + m0 * d.N, acc,
                                 static_cast<const W*>(bias.data), rows, d.N);
                           }));
    CUDA_LAUNCH_CHECK();
  });
}

void linear_dgelu_backward(Context& ctx, Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout,
                           Tensor act, Tensor weight, Tensor pre) {
  const char* op = "linear_dgelu_backward";
  CudaState& st = state_of(ctx);
  const LinearDims d = check_linear_dims(op, act, weight, dout);
  check_like(op, pre, act, "pre");
  check_like(op, dpre, act, "dpre");
  if (d.M == 0) return;
  if (d.N == 0) {  // an empty product: dpre is zero, the gradients get nothing
    CUDA_CHECK(cudaMemsetAsync(dpre.data, 0, dpre.nbytes(), st.stream));
    return;
  }
  // dpre (M, K) = (dout (M, N) @ weight (N, K)) * gelu'(pre)
  GemmArgs g = linear_dinp_gemm(dout, weight, d);
  bool done = false;
  if (d.K % 8 == 0) {
    GemmArgs ge = g;
    ge.c = {dpre.data, dpre.dtype, d.K, 0};
    ge.epilogue = GemmEpilogue::dgelu;
    ge.aux = pre.data;
    ge.aux_ld = d.K;
    done = try_gemm(st, ge);
  }
  if (!done) {
    float* fp32_out = dpre.dtype == DType::f32 ? static_cast<float*>(dpre.data) : nullptr;
    staged_gemm(st, g, fp32_out, op, [&](const float* acc, int64_t m0, int64_t rows) {
      const int64_t n = rows * d.K;
      TRAINER_FLOAT_DISPATCH(dpre.dtype, op, {
        dgelu_kernel<T><<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(
            static_cast<T*>(dpre.data) + m0 * d.K, acc,
            static_cast<const T*>(pre.data) + m0 * d.K, n);
      });
      CUDA_LAUNCH_CHECK();
    });
  }
  // The weight and bias gradients are the plain linear's (scratch is reused in
  // stream order: the kernel above has read it before these GEMMs run).
  cuda::linear_backward(ctx, Tensor{}, dweight, dbias, dout, act, weight);
}

}  // namespace trainer::cuda
