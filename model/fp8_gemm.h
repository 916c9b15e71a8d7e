// FP8 GEMMs with delayed per-tensor scaling (Transformer Engine's recipe):
// each operand is quantised with the scale its amax history gave in earlier
// steps (E4M3 for inputs and weights, E5M2 for output gradients) and this
// step's amax is recorded for the next update. The CPU backend then runs the
// GEMM on the exactly dequantised operands in fp32, which is the arithmetic
// of an FP8 tensor-core GEMM (exact products of fp8 values, fp32
// accumulation, one scale on the result) up to fp32 rounding order. The CUDA
// backend runs that FP8 GEMM (kernels/fp8_linear.h) on the same codes, with the
// scaling state's device copy (Buffers::fp8_scale and friends).
#pragma once

#include "model/layer_env.h"

namespace trainer::model {

// The GPU's FP8 GEMMs take rows in multiples of this; a ragged row block
// (a routed expert's) goes through zero-padded staging of fp8_padded_rows.
inline constexpr int64_t kFp8RowMultiple = 16;
int64_t fp8_padded_rows(int64_t rows);

// A GEMM of a layer's weight: fp8 when `fp8` is its index from
// Buffers::add_fp8_gemm, else the plain GEMM of kernels/linear.h.
void gemm_forward(const LayerEnv& env, int fp8, Tensor out, Tensor in, Tensor w, Tensor bias);
void gemm_backward(const LayerEnv& env, int fp8, Tensor dinp, Tensor dw, Tensor dbias, Tensor dout,
                   Tensor in, Tensor w);
// The same with GELU fused (kernels/linear_gelu.h): pre = in @ w^T + bias and
// act = gelu(pre); and, for in = gelu(pre), dpre = (dout @ w) * gelu'(pre) with dw,
// dbias accumulated. An fp8 GEMM composes its own GEMM with the plain GELU ops.
void gemm_gelu_forward(const LayerEnv& env, int fp8, Tensor act, Tensor pre, Tensor in, Tensor w,
                       Tensor bias);
void gemm_dgelu_backward(const LayerEnv& env, int fp8, Tensor dpre, Tensor dw, Tensor dbias,
                         Tensor dout, Tensor in, Tensor w, Tensor pre);

// The op scratch an fp8 GEMM of up to `rows` rows and `out` outputs takes
// (its amaxes, forward with `forward_bias`, backward with `bias`): declared
// by the layer that calls it.
void declare_fp8_linear_scratch(Buffers& buf, int64_t rows, int64_t out, bool forward_bias,
                                bool bias);

// out (M, N) = dequant(q(in)) @ dequant(q(w))^T [+ bias]; `idx` is the input's
// index from Buffers::add_fp8_gemm (weight idx + 1, gradient idx + 2).
void fp8_linear_forward(const LayerEnv& env, int idx, Tensor out, Tensor in, Tensor w,
                        Tensor bias);
// dinp written (skipped when empty); dw, dbias accumulated, all from the
// quantised output gradient and the same quantised input and weight the
// forward used (same scales within a step, so the same codes).
void fp8_linear_backward(const LayerEnv& env, int idx, Tensor dinp, Tensor dw, Tensor dbias,
                         Tensor dout, Tensor in, Tensor w);

}  // namespace trainer::model
