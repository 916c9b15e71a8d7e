// CPU cast + transpose: cast() into out and into a transposed view of out_t, so the
// codes are cast()'s bit for bit (the reference the CUDA kernel is tested against).
#include "kernels/cast_transpose.h"

#include "kernels/cast.h"

namespace trainer::cpu {

namespace {

void check_args(const Tensor& out, const Tensor& out_t, const Tensor& src, const char* op) {
  TRAINER_CHECK(src.ndim == 2 && src.contiguous() &&
                    (src.dtype == DType::f32 || src.dtype == DType::bf16 || src.dtype == DType::f16),
                "{}: src {} must be a contiguous (R, C) f32, bf16 or f16 tensor", op, src.str());
  const int64_t R = src.shape[0], C = src.shape[1];
  TRAINER_CHECK(out_t.ndim == 2 && out_t.shape[0] == C && out_t.shape[1] == R && out_t.contiguous() &&
                    (out_t.dtype == DType::e4m3 || out_t.dtype == DType::e5m2),
                "{}: out_t {} must be a contiguous ({}, {}) e4m3 or e5m2 tensor", op, out_t.str(), C,
                R);
  TRAINER_CHECK(out.empty() || (out.ndim == 2 && out.shape[0] == R && out.shape[1] == C &&
                                out.contiguous() && out.dtype == out_t.dtype),
                "{}: out {} must be empty or a contiguous ({}, {}) {} tensor", op, out.str(), R, C,
                dtype_name(out_t.dtype));
}

}  // namespace

void cast_transpose(Context& ctx, Tensor out, Tensor out_t, Tensor src, Tensor scale) {
  const char* op = "cast_transpose";
  check_args(out, out_t, src, op);
  if (!out.empty()) cpu::cast(ctx, out, src, scale);
  Tensor t = out_t;  // (C, R) seen as (R, C): element (r, c) lands at c * R + r
  t.shape = {src.shape[0], src.shape[1], 0, 0};
  t.stride = {1, src.shape[0], 0, 0};
  cpu::cast(ctx, t, src, scale);
}

}  // namespace trainer::cpu
