// [.bench] op benchmarks on GPT-2 124M shapes (B=8, T=1024): milliseconds and
// TFLOP/s or GB/s per op. Hidden (not part of the [cuda] suite or ctest); run with
// `cuda_ops_test "[.bench]"` (scripts/gpu_check.sh does). Figures, not checks.
#include <cstdio>
#include <functional>

#include "kernels/cast_transpose.h"
#include "kernels/fp8_linear.h"
#include "kernels/ops.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

// Mean milliseconds of `op` over `iters` runs on the compute stream, after warm-up.
double time_ms(const std::function<void()>& op, int iters = 10) {
  CudaState& st = *gpu().cuda;
  for (int i = 0; i < 2; ++i) op();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, st.stream);
  for (int i = 0; i < iters; ++i) op();
  cudaEventRecord(stop, st.stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

void report(const char* name, double ms, double flops, double bytes) {
  std::printf("bench %-40s %9.3f ms", name, ms);
  if (flops > 0) std::printf("  %8.1f TFLOP/s", flops / ms / 1e9);
  if (bytes > 0) std::printf("  %8.1f GB/s", bytes / ms / 1e6);
  std::printf("\n");
}

}  // namespace

TEST_CASE("op benchmarks at GPT-2 124M shapes", "[.bench]") {
  Context& ctx = gpu();
  const int64_t B = 8, T = 1024, C = 768, H = 12, D = 64, V = 50304, M = B * T;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    DeviceTensor x({M, C}, dtype), w({4 * C, C}, dtype), bias({4 * C}, dtype), y({M, 4 * C}, dtype);
    DeviceTensor dx({M, C}, dtype), dw({4 * C, C}), db({4 * C});
    for (DeviceTensor* t : {&x, &w, &bias, &y, &dx}) t->upload(random_floats(t->numel(), 1));
    cuda::fill(ctx, dw, 0.0f);
    cuda::fill(ctx, db, 0.0f);
    const double f = 2.0 * M * C * 4 * C;
    report(fmt::format("linear fwd {} {}x{}x{}", dtype_name(dtype), M, C, 4 * C).c_str(),
           time_ms([&] { cuda::linear_forward(ctx, y, x, w, bias); }), f, 0);
    if (dtype != DType::f32) {  // what mixed precision runs: an fp32 bias, via fp32 scratch
      report(fmt::format("linear fwd {} fp32 bias", dtype_name(dtype)).c_str(),
             time_ms([&] { cuda::linear_forward(ctx, y, x, w, db); }), f, 0);
    }
    report(fmt::format("linear bwd {} {}x{}x{}", dtype_name(dtype), M, C, 4 * C).c_str(),
           time_ms([&] { cuda::linear_backward(ctx, dx, dw, db, y, x, w); }), 2 * f, 0);
    // GPT-2's MLP with GELU fused (linear_gelu.h) against linear + gelu apart:
    // c_fc forward into (act, pre), c_proj backward into dpre.
    DeviceTensor pre({M, 4 * C}, dtype), dpre({M, 4 * C}, dtype), wp({C, 4 * C}, dtype), dwp({C, 4 * C}), dbp({C});
    pre.upload(random_floats(pre.numel(), 2));
    wp.upload(random_floats(wp.numel(), 3));
    cuda::fill(ctx, dwp, 0.0f);
    cuda::fill(ctx, dbp, 0.0f);
    report(fmt::format("fc+gelu fwd {} fused", dtype_name(dtype)).c_str(),
           time_ms([&] { cuda::linear_gelu_forward(ctx, y, pre, x, w, bias); }), f, 0);
    if (dtype != DType::f32)
      report(fmt::format("fc+gelu fwd {} fused, fp32 bias", dtype_name(dtype)).c_str(),
             time_ms([&] { cuda::linear_gelu_forward(ctx, y, pre, x, w, db); }), f, 0);
    report(fmt::format("fc+gelu fwd {} apart", dtype_name(dtype)).c_str(), time_ms([&] {
             cuda::linear_forward(ctx, pre, x, w, bias);
             cuda::gelu_forward(ctx, y, pre);
           }), f, 0);
    report(fmt::format("proj+dgelu bwd {} fused", dtype_name(dtype)).c_str(),
           time_ms([&] { cuda::linear_dgelu_backward(ctx, dpre, dwp, dbp, x, y, wp, pre); }), 2 * f, 0);
    report(fmt::format("proj+dgelu bwd {} apart", dtype_name(dtype)).c_str(), time_ms([&] {
             cuda::linear_backward(ctx, dpre, dwp, dbp, x, y, wp);
             cuda::gelu_backward(ctx, dpre, dpre, pre);
           }), 2 * f, 0);
  }
  {  // fp8: quantise one operand, then the three FP8 GEMMs of the same layer
    const DType e4 = DType::e4m3, e5 = DType::e5m2;
    const int64_t F = 4 * C;
    DeviceTensor x({M, C}, DType::bf16), xq({M, C}, e4), xq_t({C, M}, e4), wq({F, C}, e4),
        wq_t({C, F}, e4), gq({M, F}, e5), gq_t({F, M}, e5), y({M, F}, DType::bf16),
        dx({M, C}, DType::bf16), dw({F, C}), inv({3});
    for (DeviceTensor* t : {&x, &xq, &xq_t, &wq, &wq_t, &gq, &gq_t, &dw}) cuda::fill(ctx, *t, 0.0f);
    inv.upload({1.0f, 1.0f, 1.0f});
    const Tensor one(inv.view().data, {1}, DType::f32, Device::cuda);
    const double f = 2.0 * M * C * F;
    report(fmt::format("cast_transpose bf16 -> e4m3 {}x{}", M, C).c_str(),
           time_ms([&] { cuda::cast_transpose(ctx, xq, xq_t, x, one); }), 0, 3.0 * M * C);
    report(fmt::format("fp8 linear fwd {}x{}x{}", M, C, F).c_str(),
           time_ms([&] { cuda::fp8_linear_forward(ctx, y, xq, one, wq, one, Tensor{}); }), f, 0);
    report(fmt::format("fp8 linear bwd {}x{}x{}", M, C, F).c_str(), time_ms([&] {
             cuda::fp8_linear_backward(ctx, dx, dw, Tensor{}, gq, gq_t, one, xq_t, one, wq_t, one);
           }), 2 * f, 0);
  }
  for (DType dtype : {DType::f32, DType::bf16}) {
    DeviceTensor q({B, T, H, D}, dtype), k({B, T, H, D}, dtype), v({B, T, H, D}, dtype),
        o({B, T, H, D}, dtype), lse({B, H, T}), dq({B, T, H, D}, dtype), dk({B, T, H, D}, dtype),
        dv({B, T, H, D}, dtype);
    for (DeviceTensor* t : {&q, &k, &v, &o}) t->upload(random_floats(t->numel(), 2));
    // Two full (unmasked) GEMMs, as the unfused path computes; the fused one
    // skips the masked tiles, so its figure is that count over its time.
    const double f = 4.0 * B * H * T * T * D;
    for (bool flash : {false, true}) {
      if (flash && dtype == DType::f32) continue;  // the fused kernels are 16-bit only
      ctx.cuda->flash_attention = flash;
      const char* path = flash ? "fused" : "unfused";
      report(fmt::format("attention fwd {} ({})", dtype_name(dtype), path).c_str(),
             time_ms([&] { cuda::attention_forward(ctx, o, lse, q, k, v, 0); }), f, 0);
      report(fmt::format("attention bwd {} ({})", dtype_name(dtype), path).c_str(),
             time_ms([&] { cuda::attention_backward(ctx, dq, dk, dv, o, q, k, v, o, lse, 0); }),
             2.5 * f, 0);
    }
    ctx.cuda->flash_attention = true;
  }
  {
    DeviceTensor x({M, C}), y({M, C}), w({C}), b({C}), mean({M}), rstd({M}), dw({C}), db({C});
    for (DeviceTensor* t : {&x, &w, &b}) t->upload(random_floats(t->numel(), 3));
    const double bytes = 2.0 * M * C * 4;
    report("layernorm fwd fp32", time_ms([&] { cuda::layernorm_forward(ctx, y, mean, rstd, x, w, b, 1e-5f); }), 0, bytes);
    report("layernorm bwd fp32",
           time_ms([&] { cuda::layernorm_backward(ctx, y, dw, db, x, x, w, mean, rstd); }), 0, 3 * bytes);
  }
  // bf16 bandwidth-bound ops on their 16-byte packed path (aligned tensors) and,
  // with the activations one element off, on the one-element path: what the
  // packs are worth on this GPU.
  for (int64_t off : {0, 1}) {
    const char* path = off == 0 ? "packed" : "one element per lane";
    const DType bf = DType::bf16;
    const int64_t F = 4 * C;
    DeviceTensor x({M, C}, bf, off), y({M, C}, bf, off), w({C}), rstd({M}), dw({C});
    DeviceTensor gate({M, F}, bf, off), up({M, F}, bf, off), h({M, F}, bf, off);
    DeviceTensor dgate({M, F}, bf, off), dup({M, F}, bf, off);
    for (DeviceTensor* t : {&x, &w, &gate, &up, &h}) t->upload(random_floats(t->numel(), 8));
    cuda::fill(ctx, dw, 0.0f);
    const double row = 2.0 * M * C, wide = 2.0 * M * F;  // bytes of one bf16 tensor
    report(fmt::format("rmsnorm fwd bf16 ({})", path).c_str(),
           time_ms([&] { cuda::rmsnorm_forward(ctx, y, rstd, x, w, 1e-5f); }), 0, 2 * row);
    report(fmt::format("rmsnorm bwd bf16 ({})", path).c_str(),
           time_ms([&] { cuda::rmsnorm_backward(ctx, y, dw, x, x, w, rstd); }), 0, 3 * row);
    report(fmt::format("swiglu fwd bf16 ({})", path).c_str(),
           time_ms([&] { cuda::swiglu_forward(ctx, h, gate, up); }), 0, 3 * wide);
    report(fmt::format("swiglu bwd bf16 ({})", path).c_str(),
           time_ms([&] { cuda::swiglu_backward(ctx, dgate, dup, h, gate, up); }), 0, 5 * wide);
    report(fmt::format("add bf16 ({})", path).c_str(),
           time_ms([&] { cuda::add(ctx, y, x, x); }), 0, 3 * row);
  }
  {
    DeviceTensor logits({M, V}), maxv({M}), se({M}), tl({M}), loss({M}), dl({M}), t({M}, DType::i32);
    cuda::fill(ctx, logits, 0.5f);  // values do not change the cost
    t.upload_ints(random_ints(M, 5, 0, 50256));
    dl.upload(std::vector<float>(M, 1.0f / M));
    const double bytes = 1.0 * M * V * 4;
    report("cross_entropy max+sumexp+loss fp32", time_ms([&] {
             cuda::cross_entropy_max(ctx, maxv, logits, 0, 50257);
             cuda::cross_entropy_sumexp(ctx, se, tl, logits, maxv, t, 0, 50257);
             cuda::cross_entropy_loss(ctx, loss, maxv, se, tl, t);
           }), 0, 2 * bytes);
    report("cross_entropy backward fp32 (in place)", time_ms([&] {
             cuda::cross_entropy_backward(ctx, logits, logits, maxv, se, t, dl, 0, 50257);
           }), 0, 2 * bytes);
  }
  {
    DeviceTensor ids({M}, DType::i32), dy({M, C}), dwte({V, C}), dwpe({T, C});
    ids.upload_ints(random_ints(M, 6, 0, 50256));
    dy.upload(random_floats(M * C, 7));
    cuda::fill(ctx, dwte, 0.0f);
    cuda::fill(ctx, dwpe, 0.0f);
    report("embedding bwd fp32", time_ms([&] { cuda::embedding_backward(ctx, dwte, dwpe, dy, ids, T, 0, 0); }),
           0, 3.0 * M * C * 4);
  }
  {
    const int64_t n = 124'000'000;
    DeviceTensor p({n}), g({n}), m({n}), v({n});
    for (DeviceTensor* t : {&p, &g, &m, &v}) cuda::fill(ctx, *t, 0.0f);
    AdamWArgs args;
    args.lr = 1e-4f;
    report("adamw 124M params", time_ms([&] { cuda::adamw_update(ctx, p, g, m, v, args); }), 0,
           7.0 * n * 4);
  }
  SUCCEED("benchmarks printed above");
}

}  // namespace trainer::cuda_test
