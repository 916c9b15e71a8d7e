// Row-major GEMM through cuBLASLt: C[M, N] = alpha * op(A)[M, K] op(B)[K, N] + beta * C,
// optionally strided-batched, with the bias / bias-gradient epilogues the linear
// layer needs. Host-only (compiled by the C++ compiler).
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_state.h"
#include "kernels/tensor.h"

namespace trainer::cuda {

// One operand as stored: row-major with leading dimension ld (elements between rows),
// batch_stride elements between consecutive matrices of a batch.
struct GemmOperand {
  const void* ptr = nullptr;
  DType dtype = DType::f32;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

enum class GemmEpilogue {
  none,
  bias,           // C[m, n] += bias[n]; bias dtype = C dtype (cuBLASLt's rule)
  bias_grad_b,    // bias_grad[n] = sum_m op(A)... see linear.cu: BGRADB, overwrites, C dtype
  // The GELU epilogues (tanh approximation) keep the pre-activation in `aux`
  // (C's dtype, row-major with aux_ld, a multiple of 8, >= n; no batch):
  gelu_aux,       // aux[m, n] = acc, C[m, n] = gelu(acc)
  gelu_aux_bias,  // aux[m, n] = acc + bias[n], C[m, n] = gelu(acc + bias[n])
  dgelu           // C[m, n] = acc * gelu'(aux[m, n]); aux is read
};

struct GemmArgs {
  GemmOperand a, b, c;  // c is also the output D (in place)
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int batch = 1;
  float alpha = 1.0f, beta = 0.0f;
  GemmEpilogue epilogue = GemmEpilogue::none;
  void* bias = nullptr;  // input (bias) or output (bias_grad_b) vector of N elements
  void* aux = nullptr;   // the GELU epilogues' pre-activation matrix
  int64_t aux_ld = 0;
  // FP8 operands (e4m3/e5m2, never both e5m2; C fp32, bf16 or fp16): Hopper runs only
  // C = A B^T (trans_a false, trans_b true), every ld and pointer 16-byte aligned,
  // no batch, no epilogue. a_scale / b_scale: device floats multiplying A's / B's
  // codes (the dequantisation factors, 1/scale); fast_accum: Hopper's fast fp8
  // accumulation (no periodic promotion to fp32).
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool fast_accum = false;
};

// Runs the GEMM on state.stream; throws trainer::Error (naming the shapes) when
// cuBLASLt offers no algorithm or fails.
void gemm(CudaState& state, const GemmArgs& args);
// As gemm, but returns false instead of throwing when no algorithm exists for
// this epilogue (for a fallback path); other failures still throw.
bool try_gemm(CudaState& state, const GemmArgs& args);

GemmAlgoCache* create_gemm_cache();
void destroy_gemm_cache(GemmAlgoCache* cache);

}  // namespace trainer::cuda
