// Micro-benchmark of the CPU backend at the GPT-2-shaped benchmark model
// (4 layers, d_model 256, 4 heads, seq 256, micro-batch 4, vocab 50257):
// sgemm peak, each linear, attention forward+backward, the cross-entropy
// passes, and a whole training step made of these ops. Not a ctest test.
// Run: OMP_NUM_THREADS=2 <build>/test/kernels/bench_ops
#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <ctime>
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

// wall: best-of wall seconds. cpu: best-of process CPU seconds / threads, which
// on a shared machine is close to what the op takes on idle cores (wall time
// there mostly measures the neighbours).
struct Timing {
  double wall = 0.0, cpu = 0.0;
  Timing& operator+=(const Timing& o) {
    wall += o.wall;
    cpu += o.cpu;
    return *this;
  }
  Timing operator*(double k) const { return {wall * k, cpu * k}; }
};

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Each sample repeats f until it has used 50 ms of CPU time (the VM's CPU clock
// ticks every few ms), then divides by the repetitions.
Timing time_it(const std::function<void()>& f, int reps) {
  f();  // warm-up: first-touch pages, thread pool, scratch buffers
  Timing best{1e30, 1e30};
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    do {
      f();
      ++n;
    } while (cpu_seconds() - c0 < 0.05);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best.wall = std::min(best.wall, wall / n);
    best.cpu = std::min(best.cpu, (cpu_seconds() - c0) / omp_get_max_threads() / n);
  }
  return best;
}

void report(const char* what, double flops, Timing t) {
  if (flops > 0)
    std::printf("%-40s wall %8.2f ms %6.1f GFLOP/s | cpu/thread %8.2f ms %6.1f GFLOP/s\n", what,
                t.wall * 1e3, flops / t.wall * 1e-9, t.cpu * 1e3, flops / t.cpu * 1e-9);
  else
    std::printf("%-40s wall %8.2f ms                | cpu/thread %8.2f ms\n", what, t.wall * 1e3,
                t.cpu * 1e3);
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
    openblas_set_num_threads(omp_get_max_threads());
    const Timing t_blas = time_it([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.v.data(), n, b.v.data(),
                  n, 0.0f, c.v.data(), n);
    }, 3);
    openblas_set_num_threads(1);
    report("sgemm 2048^3, OpenBLAS-threaded", 2.0 * n * n * n, t_blas);
    report("sgemm 2048^3, linear_forward", 2.0 * n * n * n,
           time_it([&] { linear_forward(ctx, c.t({n, n}), a.t({n, n}), b.t({n, n}), Tensor()); }, 3));
  }

  const int64_t L = 4, C = 256, NH = 4, T = 256, B = 4, V = 50257, M = B * T, HD = C / NH;
  double step_flops = 0.0;
  Timing step;
  auto linear_fb = [&](const char* name, int64_t K, int64_t N, int times) {
    Buf x(M * K), w(N * K), bias(N), y(M * N), dy(M * N), dx(M * K), dw(N * K), db(N);
    const double f = 2.0 * M * K * N;
    const Timing tf = time_it([&] { linear_forward(ctx, y.t({M, N}), x.t({M, K}), w.t({N, K}), bias.t({N})); }, 5);
    const Timing tb = time_it([&] {
      linear_backward(ctx, dx.t({M, K}), dw.t({N, K}), db.t({N}), dy.t({M, N}), x.t({M, K}), w.t({N, K}));
    }, 5);
    char label[96];
    std::snprintf(label, sizeof label, "linear %s fwd %lldx%lldx%lld", name, (long long)M,
                  (long long)K, (long long)N);
    report(label, f, tf);
    std::snprintf(label, sizeof label, "linear %s bwd", name);
    report(label, 2 * f, tb);
    step_flops += times * 3 * f;
    step += (tf * times);
    step += (tb * times);
  };
  linear_fb("qkv", C, 3 * C, L);
  linear_fb("attn proj", C, C, L);
  linear_fb("fc", C, 4 * C, L);
  linear_fb("fc proj", 4 * C, C, L);
  linear_fb("lm head", C, V, 1);

  {
    Buf q(M * C), k(M * C), v(M * C), o(M * C), lse(B * NH * T), dout(M * C), dq(M * C), dk(M * C), dv(M * C);
    const double causal = 2.0 * B * NH * T * (T + 1) / 2 * HD;  // one causal T x T x D product
    const Timing tf = time_it([&] {
      attention_forward(ctx, o.t({B, T, NH, HD}), lse.t({B, NH, T}), q.t({B, T, NH, HD}),
                        k.t({B, T, NH, HD}), v.t({B, T, NH, HD}));
    }, 5);
    const Timing tb = time_it([&] {
      attention_backward(ctx, dq.t({B, T, NH, HD}), dk.t({B, T, NH, HD}), dv.t({B, T, NH, HD}),
                         dout.t({B, T, NH, HD}), q.t({B, T, NH, HD}), k.t({B, T, NH, HD}),
                         v.t({B, T, NH, HD}), o.t({B, T, NH, HD}), lse.t({B, NH, T}));
    }, 5);
    report("attention fwd (causal flops)", 2 * causal, tf);
    report("attention bwd (causal flops)", 5 * causal, tb);
    Timing both = tf;
    both += tb;
    report("attention fwd+bwd", 7 * causal, both);
    step_flops += L * 7 * causal;
    step += both * L;
  }

  {
    Buf logits(M * V), maxv(M), sumexp(M), tl(M), losses(M), dloss(M, 1.0f / M), dlogits(M * V);
    std::vector<int32_t> targets(M);
    for (int64_t i = 0; i < M; ++i) targets[i] = static_cast<int32_t>((i * 7919) % V);
    const Tensor tg(targets.data(), {M}, DType::i32);
    const Timing t1 = time_it([&] { cross_entropy_max(ctx, maxv.t({M}), logits.t({M, V}), 0, V); }, 5);
    const Timing t2 = time_it([&] {
      cross_entropy_sumexp(ctx, sumexp.t({M}), tl.t({M}), logits.t({M, V}), maxv.t({M}), tg, 0, V);
    }, 5);
    cross_entropy_loss(ctx, losses.t({M}), maxv.t({M}), sumexp.t({M}), tl.t({M}), tg);
    const Timing t3 = time_it([&] {
      cross_entropy_backward(ctx, dlogits.t({M, V}), logits.t({M, V}), maxv.t({M}), sumexp.t({M}), tg,
                             dloss.t({M}), 0, V);
    }, 5);
    report("cross_entropy max (1024 x 50257)", 0, t1);
    report("cross_entropy sumexp", 0, t2);
    report("cross_entropy backward", 0, t3);
    step += t1;
    step += t2;
    step += t3;
  }

  {  // the small ops of the step: 2 layernorms + gelu + 2 residual adds per layer, final LN
    Buf x(M * C), y(M * C), mean(M), rstd(M), w(C), b(C), dw(C), db(C), dx(M * C), h(M * 4 * C), dh(M * 4 * C);
    const Timing ln_f = time_it([&] { layernorm_forward(ctx, y.t({M, C}), mean.t({M}), rstd.t({M}), x.t({M, C}), w.t({C}), b.t({C}), 1e-5f); }, 5);
    const Timing ln_b = time_it([&] {
      layernorm_backward(ctx, dx.t({M, C}), dw.t({C}), db.t({C}), y.t({M, C}), x.t({M, C}), w.t({C}), mean.t({M}), rstd.t({M}));
    }, 5);
    const Timing g_f = time_it([&] { gelu_forward(ctx, dh.t({M * 4 * C}), h.t({M * 4 * C})); }, 5);
    const Timing g_b = time_it([&] { gelu_backward(ctx, dh.t({M * 4 * C}), dh.t({M * 4 * C}), h.t({M * 4 * C})); }, 5);
    const Timing add_t = time_it([&] { add(ctx, y.t({M, C}), x.t({M, C}), y.t({M, C})); }, 5);
    report("layernorm fwd (1024 x 256)", 0, ln_f);
    report("layernorm bwd", 0, ln_b);
    report("gelu fwd (1024 x 1024)", 0, g_f);
    report("gelu bwd", 0, g_b);
    report("add (1024 x 256)", 0, add_t);
    step += (ln_f * (2 * L + 1));
    step += (ln_b * (2 * L + 1));
    step += (g_f * L);
    step += (g_b * L);
    step += (add_t * (4 * L));
  }

  {  // AdamW over all parameters
    const int64_t P = V * C + T * C + L * 12 * C * C + (2 * L + 2) * C + L * 9 * C;
    Buf p(P), g(P), m(P, 1e-3f), v(P, 1e-4f);  // v >= 0 as in training (random v gives NaNs)
    AdamWArgs args;
    args.lr = 1e-4f;
    const Timing t = time_it([&] { adamw_update(ctx, p.t({P}), g.t({P}), m.t({P}), v.t({P}), args); }, 3);
    report("adamw (16.1M params)", 0, t);
    step += t;
  }
  report("training step (sum of the above)", step_flops, step);
  return 0;
}
