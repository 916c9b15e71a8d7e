// What the linear ops (linear.cu, linear_gelu.cu) share: the shape checks of inp
// (M, K), weight (N, K) and out/dout (M, N) on the GPU in one float dtype, the
// bias check, and the forward and input-gradient GEMMs (gemm.h's mapping).
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.h"

namespace trainer::cuda {

struct LinearDims {
  int64_t M, N, K;
};

inline LinearDims check_linear_dims(const char* op, const Tensor& inp, const Tensor& weight,
                                    const Tensor& out) {
  check_cuda(inp, op, "inp");
  check_cuda(weight, op, "weight");
  check_cuda(out, op, "out/dout");
  check_float_dtype(inp, op, "inp");
  TRAINER_CHECK(weight.ndim == 2 && weight.dtype == inp.dtype && out.dtype == inp.dtype,
                "{}: weight {} must be (N, K) with inp {}'s dtype, and out/dout {} too", op,
                weight.str(), inp.str(), out.str());
  const int64_t N = weight.shape[0], K = weight.shape[1];
  TRAINER_CHECK(K > 0 && inp.size(-1) == K, "{}: inp {} does not end in K = {}", op, inp.str(), K);
  const int64_t M = inp.numel() / K;
  TRAINER_CHECK(out.size(-1) == N && out.numel() == M * N, "{}: out/dout {} is not ({}, {})", op,
                out.str(), M, N);
  return {M, N, K};
}

// bias (N): the output's dtype or fp32 (mixed precision's), or empty.
inline void check_linear_bias(const char* op, const Tensor& bias, int64_t N, DType out_dtype) {
  if (bias.empty()) return;
  check_cuda(bias, op, "bias");
  TRAINER_CHECK(bias.numel() == N && (bias.dtype == out_dtype || bias.dtype == DType::f32),
                "{}: bias {} is not ({}) {} or fp32", op, bias.str(), N, dtype_name(out_dtype));
}

// out (M, N) = inp (M, K) @ weight (N, K)^T; the caller sets C (and an epilogue).
inline GemmArgs linear_forward_gemm(const Tensor& inp, const Tensor& weight, const LinearDims& d) {
  GemmArgs g;
  g.a = {inp.data, inp.dtype, d.K, 0};
  g.b = {weight.data, weight.dtype, d.K, 0};
  g.trans_b = true;
  g.m = d.M;
  g.n = d.N;
  g.k = d.K;
  return g;
}

// dinp (M, K) = dout (M, N) @ weight (N, K); the caller sets C (and an epilogue).
inline GemmArgs linear_dinp_gemm(const Tensor& dout, const Tensor& weight, const LinearDims& d) {
  GemmArgs g;
  g.a = {dout.data, dout.dtype, d.N, 0};
  g.b = {weight.data, weight.dtype, d.K, 0};
  g.m = d.M;
  g.n = d.K;
  g.k = d.N;
  return g;
}

}  // namespace trainer::cuda
