// The shape checks shared by the linear ops (linear.cu, linear_gelu.cu): inp
// (M, K), weight (N, K) and out/dout (M, N) on the GPU in one float dtype.
#pragma once

#include "kernels/cuda/common.cuh"

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

}  // namespace trainer::cuda
