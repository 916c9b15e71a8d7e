// CPU fp8 linear layer: the codes dequantised into fp32 by cast(), then the fp32
// linear layer: the arithmetic model/fp8_gemm.cpp emulates an FP8 GEMM with on the
// CPU, here as one op (the reference the CUDA op is tested against).
#include "kernels/fp8_linear.h"

#include <vector>

#include "kernels/cast.h"
#include "kernels/linear.h"

namespace trainer::cpu {

namespace {

void check_codes(const Tensor& q, const char* op, const char* name) {
  TRAINER_CHECK(q.ndim == 2 && q.contiguous() && (q.dtype == DType::e4m3 || q.dtype == DType::e5m2),
                "{}: {} {} must be a contiguous 2-d e4m3 or e5m2 tensor", op, name, q.str());
}

// deq(q) in `buf` as an fp32 tensor of q's shape, or of its transpose's.
Tensor dequantise(Context& ctx, std::vector<float>& buf, const Tensor& q, const Tensor& scale_inv,
                  bool transpose, const char* op, const char* name) {
  check_codes(q, op, name);
  const int64_t r = q.shape[0], c = q.shape[1];
  buf.resize(static_cast<size_t>(r * c));
  Tensor d = transpose ? Tensor(buf.data(), {c, r}) : Tensor(buf.data(), {r, c});
  Tensor dst = d;
  if (transpose) {  // element (i, j) of q lands at j * r + i
    dst.shape = {r, c, 0, 0};
    dst.stride = {1, r, 0, 0};
  }
  cpu::cast(ctx, dst, q, scale_inv);
  return d;
}

}  // namespace

void fp8_linear_forward(Context& ctx, Tensor out, Tensor xq, Tensor x_scale_inv, Tensor wq,
                        Tensor w_scale_inv, Tensor bias) {
  const char* op = "fp8_linear_forward";
  std::vector<float> xb, wb;
  const Tensor x = dequantise(ctx, xb, xq, x_scale_inv, false, op, "xq");
  const Tensor w = dequantise(ctx, wb, wq, w_scale_inv, false, op, "wq");
  cpu::linear_forward(ctx, out, x, w, bias);
}

void fp8_linear_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor gq,
                         Tensor gq_t, Tensor g_scale_inv, Tensor xq_t, Tensor x_scale_inv,
                         Tensor wq_t, Tensor w_scale_inv) {
  const char* op = "fp8_linear_backward";
  check_codes(gq_t, op, "gq_t");
  TRAINER_CHECK(gq.ndim == 2 && gq_t.shape[0] == gq.shape[1] && gq_t.shape[1] == gq.shape[0] &&
                    gq_t.dtype == gq.dtype,
                "{}: gq_t {} is not the transpose of gq {}", op, gq_t.str(), gq.str());
  std::vector<float> gb, xb, wb;
  const Tensor g = dequantise(ctx, gb, gq, g_scale_inv, false, op, "gq");
  const Tensor x = dequantise(ctx, xb, xq_t, x_scale_inv, true, op, "xq_t");
  const Tensor w = dequantise(ctx, wb, wq_t, w_scale_inv, true, op, "wq_t");
  cpu::linear_backward(ctx, dinp, dweight, dbias, g, x, w);
}

}  // namespace trainer::cpu
