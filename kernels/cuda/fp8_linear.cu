// FP8 linear layer through cuBLASLt (kernels/fp8_linear.h). Each of the three GEMMs
// is put in the one form Hopper's FP8 tensor cores take, C = A B^T on our row-major
// operands (gemm.h maps it to cuBLASLt's TN): forward out = xq wq^T, dinp = gq
// (wq_t)^T, dweight += gq_t (xq_t)^T. The dequantisation factors are cuBLASLt's A/B
// scale pointers; accumulation is fp32, in the forward with Hopper's fast fp8
// accumulation (Transformer Engine's choice: the forward tolerates it, gradients
// get the promoted sum). An fp32 bias is added after an fp32 GEMM into staging
// (staged_gemm.cuh) and rounded once (bias_add.cuh); dbias sums the dequantised gradient in a fixed order.
#include "kernels/cuda/bias_add.cuh"
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/staged_gemm.cuh"
#include "kernels/float_formats.h"
#include "kernels/fp8_linear.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

using namespace float_format;

// code * factor with one fp32 multiply, as cast() dequantises on both backends.
template <class Fmt>
struct Dequantised {  // deq(q)[m, n]
  const typename Fmt::T* q;
  const float* scale_inv;
  int64_t N;
  __device__ float operator()(int64_t m, int64_t n) const {
    return __fmul_rn(Fmt::load(q[m * N + n]), *scale_inv);
  }
};

void check_codes(const Tensor& q, int64_t rows, int64_t cols, const char* op, const char* name) {
  check_cuda(q, op, name);
  TRAINER_CHECK((q.dtype == DType::e4m3 || q.dtype == DType::e5m2) && q.ndim == 2 &&
                    q.shape[0] == rows && q.shape[1] == cols,
                "{}: {} {} must be ({}, {}) e4m3 or e5m2", op, name, q.str(), rows, cols);
}

void check_factor(const Tensor& s, const char* op, const char* name) {
  check_cuda(s, op, name);
  TRAINER_CHECK(s.dtype == DType::f32 && s.numel() == 1, "{}: {} {} must be (1) fp32", op, name,
                s.str());
}

void check_output(const Tensor& t, int64_t rows, int64_t cols, const char* op, const char* name) {
  check_cuda(t, op, name);
  check_float_dtype(t, op, name);
  TRAINER_CHECK(t.ndim >= 1 && t.size(-1) == cols && t.numel() == rows * cols,
                "{}: {} {} is not ({}, {})", op, name, t.str(), rows, cols);
}

// The alignment rule of Hopper's FP8 GEMMs (16-byte leading dimensions) in terms of
// the layer's sizes; checked here so the message names them.
void check_sizes(int64_t M, int64_t N, int64_t K, const char* op) {
  TRAINER_CHECK(M > 0 && N > 0 && K > 0 && M % 16 == 0 && N % 16 == 0 && K % 16 == 0,
                "{}: M = {}, N = {}, K = {} must be positive multiples of 16 for FP8 GEMMs", op, M,
                N, K);
}

GemmArgs tn(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
            int64_t m, int64_t n, int64_t k) {
  GemmArgs g;
  g.a = {a.data, a.dtype, k, 0};
  g.b = {b.data, b.dtype, k, 0};
  g.trans_b = true;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a_scale = static_cast<const float*>(a_scale_inv.data);
  g.b_scale = static_cast<const float*>(b_scale_inv.data);
  return g;
}

}  // namespace

void fp8_linear_forward(Context& ctx, Tensor out, Tensor xq, Tensor x_scale_inv, Tensor wq,
                        Tensor w_scale_inv, Tensor bias) {
  const char* op = "fp8_linear_forward";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(xq.ndim == 2 && wq.ndim == 2, "{}: xq {} and wq {} must be 2-d", op, xq.str(),
                wq.str());
  const int64_t M = xq.shape[0], K = xq.shape[1], N = wq.shape[0];
  check_codes(xq, M, K, op, "xq");
  check_codes(wq, N, K, op, "wq");
  check_factor(x_scale_inv, op, "x_scale_inv");
  check_factor(w_scale_inv, op, "w_scale_inv");
  check_output(out, M, N, op, "out");
  if (!bias.empty()) {
    check_cuda(bias, op, "bias");
    TRAINER_CHECK(bias.dtype == DType::f32 && bias.numel() == N, "{}: bias {} is not ({}) fp32",
                  op, bias.str(), N);
  }
  check_sizes(M, N, K, op);
  GemmArgs g = tn(xq, x_scale_inv, wq, w_scale_inv, M, N, K);
  g.fast_accum = true;
  if (bias.empty()) {
    g.c = {out.data, out.dtype, N, 0};
    gemm(st, g);
    return;
  }
  float* fp32_out = out.dtype == DType::f32 ? static_cast<float*>(out.data) : nullptr;
  staged_gemm(st, g, fp32_out, op, [&](const float* acc, int64_t m0, int64_t rows) {
    TRAINER_FLOAT_DISPATCH(out.dtype, op, {
      add_bias(st, static_cast<T*>(out.data) + m0 * N, acc, static_cast<const float*>(bias.data),
               rows, N);
    });
  });
}

void fp8_linear_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor gq,
                         Tensor gq_t, Tensor g_scale_inv, Tensor xq_t, Tensor x_scale_inv,
                         Tensor wq_t, Tensor w_scale_inv) {
  const char* op = "fp8_linear_backward";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(gq.ndim == 2 && xq_t.ndim == 2, "{}: gq {} and xq_t {} must be 2-d", op, gq.str(),
                xq_t.str());
  const int64_t M = gq.shape[0], N = gq.shape[1], K = xq_t.shape[0];
  check_codes(gq, M, N, op, "gq");
  check_codes(gq_t, N, M, op, "gq_t");
  check_dtype(gq_t, gq.dtype, op, "gq_t");
  check_codes(xq_t, K, M, op, "xq_t");
  check_codes(wq_t, K, N, op, "wq_t");
  for (const auto& [t, name] : {std::pair{&g_scale_inv, "g_scale_inv"}, {&x_scale_inv, "x_scale_inv"},
                                {&w_scale_inv, "w_scale_inv"}})
    check_factor(*t, op, name);
  check_cuda(dweight, op, "dweight");
  TRAINER_CHECK(dweight.dtype == DType::f32 && dweight.ndim == 2 && dweight.shape[0] == N &&
                    dweight.shape[1] == K,
                "{}: dweight {} is not ({}, {}) fp32", op, dweight.str(), N, K);
  if (!dinp.empty()) check_output(dinp, M, K, op, "dinp");
  if (!dbias.empty()) {
    check_cuda(dbias, op, "dbias");
    TRAINER_CHECK(dbias.dtype == DType::f32 && dbias.numel() == N, "{}: dbias {} is not ({}) fp32",
                  op, dbias.str(), N);
  }
  check_sizes(M, N, K, op);

  if (!dinp.empty()) {  // dinp (M, K) = G (M, N) @ (wq_t (K, N))^T
    GemmArgs g = tn(gq, g_scale_inv, wq_t, w_scale_inv, M, K, N);
    g.c = {dinp.data, dinp.dtype, K, 0};
    gemm(st, g);
  }
  // dweight (N, K) += gq_t (N, M) @ (xq_t (K, M))^T
  GemmArgs g = tn(gq_t, g_scale_inv, xq_t, x_scale_inv, N, K, M);
  g.c = {dweight.data, DType::f32, K, 0};
  g.beta = 1.0f;
  gemm(st, g);
  if (!dbias.empty()) {
    float* partial = static_cast<float*>(scratch(st, fp8_linear_backward_scratch_bytes(M, N, true), op));
    const auto* s = static_cast<const float*>(g_scale_inv.data);
    if (gq.dtype == DType::e4m3)
      column_sums(st, Dequantised<E4M3>{static_cast<const uint8_t*>(gq.data), s, N}, M, N, partial,
                  static_cast<float*>(dbias.data), true);
    else
      column_sums(st, Dequantised<E5M2>{static_cast<const uint8_t*>(gq.data), s, N}, M, N, partial,
                  static_cast<float*>(dbias.data), true);
  }
}

}  // namespace trainer::cuda
