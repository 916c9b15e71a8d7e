// The CPU fp8 ops that the CUDA ones are tested against: cast_transpose against
// cast() element by element, and the fp8 linear layer against a double-precision
// sum over the dequantised codes, which checks which operand each transposed code
// tensor stands for.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cast.h"
#include "kernels/cast_transpose.h"
#include "kernels/fp8_linear.h"
#include "kernels/numeric.h"

using trainer::Context;
using trainer::Device;
using trainer::DType;
using trainer::Tensor;

namespace {

Context& ctx() {
  static Context c{Device::cpu, nullptr};
  return c;
}

std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct Codes {
  std::vector<uint8_t> q, q_t;  // (R, C) and its transpose
  float scale_inv;
  DType dtype;
  Tensor tensor(int64_t r, int64_t c) { return Tensor(q.data(), {r, c}, dtype, Device::cpu); }
  Tensor transposed(int64_t r, int64_t c) { return Tensor(q_t.data(), {c, r}, dtype, Device::cpu); }
  double value(size_t i) const {
    const float code = dtype == DType::e4m3 ? trainer::e4m3_to_f32(q[i]) : trainer::e5m2_to_f32(q[i]);
    return static_cast<double>(code * scale_inv);  // one fp32 multiply, as cast() dequantises
  }
};

Codes quantise(std::vector<float> values, int64_t r, int64_t c, DType dtype, float scale) {
  Codes out{std::vector<uint8_t>(values.size()), std::vector<uint8_t>(values.size()), 1.0f / scale,
            dtype};
  std::vector<float> s = {scale};
  trainer::cpu::cast_transpose(ctx(), out.tensor(r, c), out.transposed(r, c),
                               Tensor(values.data(), {r, c}), Tensor(s.data(), {1}));
  return out;
}

}  // namespace

TEST_CASE("fp8 ops: cast_transpose writes cast()'s codes in both layouts", "[cpu][precision]") {
  for (DType from : {DType::f32, DType::bf16, DType::f16}) {
    for (DType to : {DType::e4m3, DType::e5m2}) {
      const int64_t R = 37, C = 70;
      auto x = uniform(R * C, 31, -600.0f, 600.0f);
      x[5] = std::nanf("");
      x[6] = INFINITY;
      std::vector<uint8_t> src(R * C * trainer::dtype_size(from));
      Tensor s(src.data(), {R, C}, from, Device::cpu);
      trainer::cpu::cast(ctx(), s, Tensor(x.data(), {R, C}), Tensor{});
      std::vector<float> scale = {0.75f};
      const Tensor sc(scale.data(), {1});
      std::vector<uint8_t> q(R * C), q_t(R * C, 0), ref(R * C), t_only(R * C, 0);
      trainer::cpu::cast(ctx(), Tensor(ref.data(), {R, C}, to, Device::cpu), s, sc);
      trainer::cpu::cast_transpose(ctx(), Tensor(q.data(), {R, C}, to, Device::cpu),
                                   Tensor(q_t.data(), {C, R}, to, Device::cpu), s, sc);
      trainer::cpu::cast_transpose(ctx(), Tensor{}, Tensor(t_only.data(), {C, R}, to, Device::cpu),
                                   s, sc);
      INFO(trainer::dtype_name(from) << " -> " << trainer::dtype_name(to));
      CHECK(q == ref);
      bool transposed = true;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) transposed = transposed && q_t[c * R + r] == ref[r * C + c];
      CHECK(transposed);
      CHECK(t_only == q_t);
    }
  }
}

TEST_CASE("fp8 ops: cast_transpose refuses what it does not take", "[cpu][precision]") {
  std::vector<float> x(6);
  std::vector<uint8_t> q(6);
  const Tensor src(x.data(), {2, 3});
  CHECK_THROWS_AS(trainer::cpu::cast_transpose(ctx(), Tensor{}, Tensor(q.data(), {2, 3}, DType::e4m3, Device::cpu), src, Tensor{}),
                  trainer::Error);  // not the transpose's shape
  CHECK_THROWS_AS(trainer::cpu::cast_transpose(ctx(), Tensor{}, Tensor(x.data(), {3, 2}), src, Tensor{}),
                  trainer::Error);  // not an fp8 destination
}

TEST_CASE("fp8 ops: the fp8 linear layer is the fp32 one on the dequantised codes",
          "[cpu][precision]") {
  const int64_t M = 48, K = 32, N = 16;
  Codes x = quantise(uniform(M * K, 41, -2.0f, 2.0f), M, K, DType::e4m3, 224.0f);
  Codes w = quantise(uniform(N * K, 42, -0.5f, 0.5f), N, K, DType::e4m3, 896.0f);
  Codes g = quantise(uniform(M * N, 43, -1.0f, 1.0f), M, N, DType::e5m2, 57344.0f);
  std::vector<float> bias = uniform(N, 44, -1.0f, 1.0f), dw = uniform(N * K, 45, -1.0f, 1.0f),
                     db = uniform(N, 46, -1.0f, 1.0f), out(M * N), dx(M * K);
  const std::vector<float> dw0 = dw, db0 = db;
  std::vector<float> inv = {x.scale_inv, w.scale_inv, g.scale_inv};
  const Tensor sx(&inv[0], {1}), sw(&inv[1], {1}), sg(&inv[2], {1});
  trainer::cpu::fp8_linear_forward(ctx(), Tensor(out.data(), {M, N}), x.tensor(M, K), sx,
                                   w.tensor(N, K), sw, Tensor(bias.data(), {N}));
  trainer::cpu::fp8_linear_backward(ctx(), Tensor(dx.data(), {M, K}), Tensor(dw.data(), {N, K}),
                                    Tensor(db.data(), {N}), g.tensor(M, N), g.transposed(M, N), sg,
                                    x.transposed(M, K), sx, w.transposed(N, K), sw);
  auto close = [](double got, double want) { return std::abs(got - want) <= 1e-5 * (1 + std::abs(want)); };
  bool ok_out = true, ok_dx = true, ok_dw = true, ok_db = true;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias[n];
      for (int64_t k = 0; k < K; ++k) s += x.value(m * K + k) * w.value(n * K + k);
      ok_out = ok_out && close(out[m * N + n], s);
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += g.value(m * N + n) * w.value(n * K + k);
      ok_dx = ok_dx && close(dx[m * K + k], s);
    }
  for (int64_t n = 0; n < N; ++n) {
    double sb = db0[n];
    for (int64_t m = 0; m < M; ++m) sb += g.value(m * N + n);
    ok_db = ok_db && close(db[n], sb);
    for (int64_t k = 0; k < K; ++k) {
      double s = dw0[n * K + k];
      for (int64_t m = 0; m < M; ++m) s += g.value(m * N + n) * x.value(m * K + k);
      ok_dw = ok_dw && close(dw[n * K + k], s);
    }
  }
  CHECK(ok_out);
  CHECK(ok_dx);
  CHECK(ok_dw);
  CHECK(ok_db);
}
