// FP8 quantise-dequantise around the fp32 GEMMs of kernels/linear.h (the CPU), or
// quantise into the codes the FP8 GEMMs of kernels/fp8_linear.h read (the GPU).
#include "model/fp8_gemm.h"

#include "kernels/cast.h"
#include "kernels/cast_transpose.h"
#include "kernels/elementwise.h"
#include "kernels/fp8_linear.h"
#include "kernels/gelu.h"
#include "kernels/linear.h"
#include "kernels/linear_gelu.h"
#include "kernels/memory.h"
#include "kernels/op_scratch.h"

namespace trainer::model {

namespace {

// Half `part` (0 or 1) of workspace buffer `id` as (rows, cols) fp8 codes: a
// dequantised-fp32 buffer holds an operand's codes and its transpose's, each half
// starting aligned for the GEMMs.
Tensor codes(const LayerEnv& env, BufferId id, int64_t rows, int64_t cols, DType dtype, int part) {
  Tensor b = env.buf.get(id);
  const size_t half = (size_t(rows * cols) + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  TRAINER_CHECK(2 * half <= b.nbytes(), "fp8 workspace {} too small for two ({}, {}) code tensors",
                b.str(), rows, cols);
  return Tensor(static_cast<char*>(b.data) + part * half, {rows, cols}, dtype, b.device);
}

// A (rows, last dim) view of a contiguous activation.
Tensor matrix(const Tensor& t) { return t.view({t.numel() / t.size(-1), t.size(-1)}); }

// The GPU: this step's amax recorded, t quantised with its scale (as quantize()
// below), into codes (part 0) and/or transposed codes (part 1) of workspace `id`.
void quantize_codes(const LayerEnv& env, int idx, Tensor t, BufferId id, Tensor* q, Tensor* q_t) {
  const Buffers& b = env.buf;
  const DType format = b.fp8()->format(idx);
  amax(env.ctx, b.fp8_amax(idx), t);
  if (q) *q = codes(env, id, t.size(0), t.size(1), format, 0);
  if (!q_t) {
    cast(env.ctx, *q, t, b.fp8_scale(idx));
    return;
  }
  *q_t = codes(env, id, t.size(1), t.size(0), format, 1);
  cast_transpose(env.ctx, q ? *q : Tensor{}, *q_t, t, b.fp8_scale(idx));
}

// The weight's codes (transposed: for the backward), from its cache when it
// has one (ModelConfig::fp8_cache_weights): the step's first use records the
// amax and casts both, later ones read them; else quantised into workspace w.
Tensor weight_codes(const LayerEnv& env, int widx, Tensor w, bool transposed) {
  const Buffers& b = env.buf;
  const BufferId cache = b.fp8_weight_cache(widx);
  Tensor q;
  if (cache < 0) {
    quantize_codes(env, widx, w, b.fp8_workspace().w, transposed ? nullptr : &q,
                   transposed ? &q : nullptr);
    return q;
  }
  Tensor q_t;
  if (b.fp8_weight_cached(widx)) {
    const DType format = b.fp8()->format(widx);
    q = codes(env, cache, w.size(0), w.size(1), format, 0);
    q_t = codes(env, cache, w.size(1), w.size(0), format, 1);
  } else {
    quantize_codes(env, widx, w, cache, &q, &q_t);
    b.set_fp8_weight_cached(widx);
  }
  return transposed ? q_t : q;
}

void gpu_forward(const LayerEnv& env, int idx, Tensor out, Tensor in, Tensor w, Tensor bias) {
  const Buffers& b = env.buf;
  const Buffers::Fp8Workspace& ws = b.fp8_workspace();
  Tensor x = matrix(in), xq;
  quantize_codes(env, idx, x, ws.x, &xq, nullptr);
  Tensor wq = weight_codes(env, idx + 1, w, false);
  trainer::fp8_linear_forward(env.ctx, out.view({x.size(0), w.size(0)}), xq, b.fp8_scale_inv(idx),
                              wq, b.fp8_scale_inv(idx + 1), bias);
}

// Re-quantises the input (and the weight, without its cache) with the forward's
// scales (the same codes, and the same amaxes recorded again), as the CPU
// emulation does.
void gpu_backward(const LayerEnv& env, int idx, Tensor dinp, Tensor dw, Tensor dbias, Tensor dout,
                  Tensor in, Tensor w) {
  const Buffers& b = env.buf;
  const Buffers::Fp8Workspace& ws = b.fp8_workspace();
  Tensor g = matrix(dout), x = matrix(in), gq, gq_t, xq_t;
  quantize_codes(env, idx + 2, g, ws.g, &gq, &gq_t);
  quantize_codes(env, idx, x, ws.x, nullptr, &xq_t);
  Tensor wq_t = weight_codes(env, idx + 1, w, true);
  trainer::fp8_linear_backward(env.ctx, dinp.empty() ? dinp : dinp.view({x.size(0), x.size(1)}),
                               dw, dbias, gq, gq_t, b.fp8_scale_inv(idx + 2), xq_t,
                               b.fp8_scale_inv(idx), wq_t, b.fp8_scale_inv(idx + 1));
}

// Ragged rows on the GPU (a routed expert's block): the FP8 GEMMs take rows
// in multiples of 16, so the operands are copied into zero-padded staging.
// Zero rows leave the amaxes, the codes of the real rows and the weight and
// bias gradients as they are; the real rows of the results are copied back.

// (rows padded, cols) view of staging buffer `id`, its tail rows zeroed; the first
// `src` rows copied in when given.
Tensor padded(const LayerEnv& env, BufferId id, int64_t rows, int64_t cols, Tensor src) {
  TRAINER_CHECK(id >= 0, "fp8 GEMM with {} rows on the GPU needs the padded staging "
                "(ModelConfig::fp8_pad_rows)", rows);
  Tensor b = env.buf.get(id);
  const int64_t p = fp8_padded_rows(rows);
  TRAINER_CHECK(p * cols <= b.numel(), "fp8 padded staging {} too small for ({}, {})", b.str(), p, cols);
  Tensor t(b.data, {p, cols}, b.dtype, b.device);
  if (!src.empty()) copy(env.ctx, t.slice(0, rows), src.view({rows, cols}));
  fill(env.ctx, t.slice(rows, p), 0.0f);
  return t;
}

void gpu_forward_ragged(const LayerEnv& env, int idx, Tensor out, Tensor in, Tensor w, Tensor bias) {
  const Buffers::Fp8Workspace& ws = env.buf.fp8_workspace();
  Tensor x = matrix(in);
  const int64_t M = x.size(0), N = w.size(0);
  Tensor xp = padded(env, ws.pad_in, M, x.size(1), x);
  Tensor op = padded(env, ws.pad_out, M, N, {});
  TRAINER_CHECK(op.dtype == out.dtype, "fp8 padded output {} for a {} output", op.str(), out.str());
  gpu_forward(env, idx, op, xp, w, bias);
  copy(env.ctx, out.view({M, N}), op.slice(0, M));
}

void gpu_backward_ragged(const LayerEnv& env, int idx, Tensor dinp, Tensor dw, Tensor dbias,
                         Tensor dout, Tensor in, Tensor w) {
  const Buffers::Fp8Workspace& ws = env.buf.fp8_workspace();
  Tensor g = matrix(dout), x = matrix(in);
  const int64_t M = x.size(0);
  Tensor gp = padded(env, ws.pad_out, M, g.size(1), g);
  Tensor xp = padded(env, ws.pad_in, M, x.size(1), x);
  Tensor dp = dinp.empty() ? Tensor{} : padded(env, ws.pad_dinp, M, x.size(1), {});
  gpu_backward(env, idx, dp, dw, dbias, gp, xp, w);
  if (!dinp.empty()) copy(env.ctx, dinp.view({M, x.size(1)}), dp.slice(0, M));
}

// A (M, K) view of the first M*K elements of workspace buffer `id` as `dtype`.
Tensor workspace(const LayerEnv& env, BufferId id, const Tensor& like, DType dtype) {
  Tensor b = env.buf.get(id);
  int64_t K = like.size(-1), M = K == 0 ? 0 : like.numel() / K;
  TRAINER_CHECK(size_t(M * K) * dtype_size(dtype) <= size_t(b.numel()) * dtype_size(b.dtype),
                "fp8 workspace {} too small for {}", b.str(), like.str());
  return Tensor(b.data, {M, K}, dtype, b.device);
}

// Records amax(t) for tensor idx, quantises t with its scale and returns the
// dequantised values in f32 workspace `dst`.
Tensor quantize(const LayerEnv& env, int idx, Tensor t, BufferId dst) {
  const Buffers& b = env.buf;
  const Buffers::Fp8Workspace& ws = b.fp8_workspace();
  Tensor flat = t.view({t.numel() / t.size(-1), t.size(-1)});
  amax(env.ctx, b.fp8_amax(idx), flat);
  Tensor q = workspace(env, ws.q, flat, b.fp8()->format(idx));
  cast(env.ctx, q, flat, b.fp8_scale(idx));
  Tensor d = workspace(env, dst, flat, DType::f32);
  cast(env.ctx, d, q, b.fp8_scale_inv(idx));
  return d;
}

}  // namespace

int64_t fp8_padded_rows(int64_t rows) {
  return (rows + kFp8RowMultiple - 1) / kFp8RowMultiple * kFp8RowMultiple;
}

void gemm_forward(const LayerEnv& env, int fp8, Tensor out, Tensor in, Tensor w, Tensor bias) {
  if (fp8 >= 0)
    fp8_linear_forward(env, fp8, out, in, w, bias);
  else
    linear_forward(env.ctx, out, in, w, bias);
}

void gemm_backward(const LayerEnv& env, int fp8, Tensor dinp, Tensor dw, Tensor dbias, Tensor dout,
                   Tensor in, Tensor w) {
  if (fp8 >= 0)
    fp8_linear_backward(env, fp8, dinp, dw, dbias, dout, in, w);
  else
    linear_backward(env.ctx, dinp, dw, dbias, dout, in, w);
}

void gemm_gelu_forward(const LayerEnv& env, int fp8, Tensor act, Tensor pre, Tensor in, Tensor w,
                       Tensor bias) {
  if (fp8 >= 0) {
    fp8_linear_forward(env, fp8, pre, in, w, bias);
    gelu_forward(env.ctx, act, pre);
  } else {
    linear_gelu_forward(env.ctx, act, pre, in, w, bias);
  }
}

void gemm_dgelu_backward(const LayerEnv& env, int fp8, Tensor dpre, Tensor dw, Tensor dbias,
                         Tensor dout, Tensor in, Tensor w, Tensor pre) {
  if (fp8 >= 0) {
    fp8_linear_backward(env, fp8, dpre, dw, dbias, dout, in, w);
    gelu_backward(env.ctx, dpre, dpre, pre);
  } else {
    linear_dgelu_backward(env.ctx, dpre, dw, dbias, dout, in, w, pre);
  }
}

void declare_fp8_linear_scratch(Buffers& buf, int64_t rows, int64_t out, bool forward_bias,
                                bool bias) {
  buf.declare_op_scratch(amax_scratch_bytes());
  buf.declare_op_scratch(fp8_linear_forward_scratch_bytes(rows, out, forward_bias));
  buf.declare_op_scratch(fp8_linear_backward_scratch_bytes(rows, out, bias));
}

void fp8_linear_forward(const LayerEnv& env, int idx, Tensor out, Tensor in, Tensor w,
                        Tensor bias) {
  if (env.ctx.device == Device::cuda) {
    if (matrix(in).size(0) % kFp8RowMultiple != 0) return gpu_forward_ragged(env, idx, out, in, w, bias);
    return gpu_forward(env, idx, out, in, w, bias);
  }
  const Buffers::Fp8Workspace& ws = env.buf.fp8_workspace();
  Tensor x = quantize(env, idx, in, ws.x);
  Tensor wq = quantize(env, idx + 1, w, ws.w);
  linear_forward(env.ctx, out.view({x.size(0), out.size(-1)}), x, wq, bias);
}

void fp8_linear_backward(const LayerEnv& env, int idx, Tensor dinp, Tensor dw, Tensor dbias,
                         Tensor dout, Tensor in, Tensor w) {
  if (env.ctx.device == Device::cuda) {
    if (matrix(in).size(0) % kFp8RowMultiple != 0)
      return gpu_backward_ragged(env, idx, dinp, dw, dbias, dout, in, w);
    return gpu_backward(env, idx, dinp, dw, dbias, dout, in, w);
  }
  const Buffers::Fp8Workspace& ws = env.buf.fp8_workspace();
  Tensor g = quantize(env, idx + 2, dout, ws.g);
  Tensor x = quantize(env, idx, in, ws.x);
  Tensor wq = quantize(env, idx + 1, w, ws.w);
  linear_backward(env.ctx, dinp.empty() ? dinp : dinp.view({g.size(0), wq.size(1)}), dw, dbias,
                  g, x, wq);
}

}  // namespace trainer::model
