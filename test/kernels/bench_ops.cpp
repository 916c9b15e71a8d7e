// Micro-benchmark of the CPU backend at the GPT-2-shaped benchmark model
// (4 layers, d_model 256, 4 heads, seq 256, micro-batch 4, vocab 50257):
// sgemm peak, each linear, attention forward+backward, the cross-entropy
// passes, and a whole training step made of these ops. Not a ctest test.
// Run: OMP_NUM_THREADS=2 build-<name>/test/kernels/bench_ops
#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "kernels/ops.h"

using namespace trainer;

namespace {

struct Buf {
  std::vector<float> v;
  explicit Buf(int64_t n, float fill = 0.0f) : v(n, fill) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> d(-0.5f, 0.5f);
    if (fill != 0.0f) return;
    for (float& x : v) x = d(rng);
  }
  Tensor t(std::initializer_list<int64_t> shape) { return Tensor(v.data(), shape); }
};

// Best-of seconds per call (after one warm-up call).
double time_it(const std::function<void()>& f, int reps) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void report(const char* what, double flops, double sec) {
  std::printf("%-44s %9.3f ms %8.1f GFLOP/s\n", what, sec * 1e3, flops / sec * 1e-9);
}

}  // namespace

int main() {
  Context ctx;
  {  // the first BLAS op applies the backend's threading and kernel choice
    std::vector<float> one(1, 1.0f);
    linear_forward(ctx, Tensor(one.data(), {1, 1}), Tensor(one.data(), {1, 1}),
                   Tensor(one.data(), {1, 1}), Tensor());
  }
  std::printf("OpenMP threads %d, OpenBLAS parallel mode %d (0 none, 1 pthreads, 2 OpenMP), "
              "kernels %s\n", omp_get_max_threads(), openblas_get_parallel(), openblas_get_corename());

  // Peak: a large square sgemm, both as OpenBLAS threads it and as linear_forward splits it.
  {
    const int64_t n = 2048;
    Buf a(n * n), b(n * n), c(n * n);
    const int threads_before = openblas_get_num_threads();
    openblas_set_num_threads(omp_get_max_threads());
    const double s_blas = time_it([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.v.data(), n, b.v.data(),
                  n, 0.0f, c.v.data(), n);
    }, 3);
    openblas_set_num_threads(threads_before);
    report("sgemm 2048^3, OpenBLAS-threaded", 2.0 * n * n * n, s_blas);
    const double s_lin = time_it([&] { linear_forward(ctx, c.t({n, n}), a.t({n, n}), b.t({n, n}), Tensor()); }, 3);
    report("sgemm 2048^3, linear_forward (OpenMP split)", 2.0 * n * n * n, s_lin);
  }

  const int64_t L = 4, C = 256, NH = 4, T = 256, B = 4, V = 50257, M = B * T, HD = C / NH;
  double step_flops = 0.0, step_sec = 0.0;
  auto linear_fb = [&](const char* name, int64_t K, int64_t N, int times) {
    Buf x(M * K), w(N * K), bias(N), y(M * N), dy(M * N), dx(M * K), dw(N * K), db(N);
    const double f = 2.0 * M * K * N;
    const double sf = time_it([&] { linear_forward(ctx, y.t({M, N}), x.t({M, K}), w.t({N, K}), bias.t({N})); }, 5);
    const double sb = time_it([&] {
      linear_backward(ctx, dx.t({M, K}), dw.t({N, K}), db.t({N}), dy.t({M, N}), x.t({M, K}), w.t({N, K}));
    }, 5);
    char label[96];
    std::snprintf(label, sizeof label, "linear %s fwd (%lld x %lld x %lld)", name, (long long)M,
                  (long long)K, (long long)N);
    report(label, f, sf);
    std::snprintf(label, sizeof label, "linear %s bwd", name);
    report(label, 2 * f, sb);
    step_flops += times * 3 * f;
    step_sec += times * (sf + sb);
  };
  linear_fb("qkv", C, 3 * C, L);
  linear_fb("attn proj", C, C, L);
  linear_fb("fc", C, 4 * C, L);
  linear_fb("fc proj", 4 * C, C, L);
  linear_fb("lm head", C, V, 1);

  {
    Buf q(M * C), k(M * C), v(M * C), o(M * C), lse(B * NH * T), dout(M * C), dq(M * C), dk(M * C), dv(M * C);
    const double causal = 2.0 * B * NH * T * (T + 1) / 2 * HD;  // one causal T x T x D product
    const double sf = time_it([&] {
      attention_forward(ctx, o.t({B, T, NH, HD}), lse.t({B, NH, T}), q.t({B, T, NH, HD}),
                        k.t({B, T, NH, HD}), v.t({B, T, NH, HD}));
    }, 5);
    const double sb = time_it([&] {
      attention_backward(ctx, dq.t({B, T, NH, HD}), dk.t({B, T, NH, HD}), dv.t({B, T, NH, HD}),
                         dout.t({B, T, NH, HD}), q.t({B, T, NH, HD}), k.t({B, T, NH, HD}),
                         v.t({B, T, NH, HD}), o.t({B, T, NH, HD}), lse.t({B, NH, T}));
    }, 5);
    report("attention fwd (causal flops)", 2 * causal, sf);
    report("attention bwd (causal flops)", 5 * causal, sb);
    report("attention fwd+bwd", 7 * causal, sf + sb);
    step_flops += L * 7 * causal;
    step_sec += L * (sf + sb);
  }

  {
    Buf logits(M * V), maxv(M), sumexp(M), tl(M), losses(M), dloss(M, 1.0f / M);
    std::vector<int32_t> targets(M);
    for (int64_t i = 0; i < M; ++i) targets[i] = static_cast<int32_t>((i * 7919) % V);
    const Tensor tg(targets.data(), {M}, DType::i32);
    const double s1 = time_it([&] { cross_entropy_max(ctx, maxv.t({M}), logits.t({M, V}), 0, V); }, 5);
    const double s2 = time_it([&] {
      cross_entropy_sumexp(ctx, sumexp.t({M}), tl.t({M}), logits.t({M, V}), maxv.t({M}), tg, 0, V);
    }, 5);
    cross_entropy_loss(ctx, losses.t({M}), maxv.t({M}), sumexp.t({M}), tl.t({M}), tg);
    Buf dlogits(M * V);
    const double s3 = time_it([&] {
      cross_entropy_backward(ctx, dlogits.t({M, V}), logits.t({M, V}), maxv.t({M}), sumexp.t({M}), tg,
                             dloss.t({M}), 0, V);
    }, 5);
    std::printf("%-44s %9.3f ms\n", "cross_entropy max", s1 * 1e3);
    std::printf("%-44s %9.3f ms\n", "cross_entropy sumexp", s2 * 1e3);
    std::printf("%-44s %9.3f ms\n", "cross_entropy backward", s3 * 1e3);
    step_sec += s1 + s2 + s3;
  }

  {  // the small ops of the step: 2 layernorms + gelu + 2 residual adds per layer, final LN
    Buf x(M * C), y(M * C), mean(M), rstd(M), w(C), b(C), dw(C), db(C), dx(M * C), h(M * 4 * C), dh(M * 4 * C);
    const double ln_f = time_it([&] { layernorm_forward(ctx, y.t({M, C}), mean.t({M}), rstd.t({M}), x.t({M, C}), w.t({C}), b.t({C}), 1e-5f); }, 5);
    const double ln_b = time_it([&] {
      layernorm_backward(ctx, dx.t({M, C}), dw.t({C}), db.t({C}), y.t({M, C}), x.t({M, C}), w.t({C}), mean.t({M}), rstd.t({M}));
    }, 5);
    const double g_f = time_it([&] { gelu_forward(ctx, dh.t({M * 4 * C}), h.t({M * 4 * C})); }, 5);
    const double g_b = time_it([&] { gelu_backward(ctx, dh.t({M * 4 * C}), dh.t({M * 4 * C}), h.t({M * 4 * C})); }, 5);
    const double add_s = time_it([&] { add(ctx, y.t({M, C}), x.t({M, C}), y.t({M, C})); }, 5);
    std::printf("%-44s %9.3f ms / %.3f ms\n", "layernorm fwd / bwd (1024 x 256)", ln_f * 1e3, ln_b * 1e3);
    std::printf("%-44s %9.3f ms / %.3f ms\n", "gelu fwd / bwd (1024 x 1024)", g_f * 1e3, g_b * 1e3);
    step_sec += (2 * L + 1) * (ln_f + ln_b) + L * (g_f + g_b) + 2 * L * 2 * add_s;
  }

  {  // AdamW over all parameters
    const int64_t P = V * C + T * C + L * 12 * C * C + (2 * L + 2) * C + L * 9 * C;
    Buf p(P), g(P), m(P), v(P);
    AdamWArgs args;
    args.lr = 1e-4f;
    const double s = time_it([&] { adamw_update(ctx, p.t({P}), g.t({P}), m.t({P}), v.t({P}), args); }, 3);
    std::printf("%-44s %9.3f ms (%lld params)\n", "adamw", s * 1e3, (long long)P);
    step_sec += s;
  }
  std::printf("%-44s %9.3f ms %8.1f GFLOP/s (sum of the op timings above)\n", "training step estimate",
              step_sec * 1e3, step_flops / step_sec * 1e-9);
  return 0;
}
