// [cuda] The router statistics (kernels/moe_stats.h) and the shared expert's
// sigmoid gate (kernels/sigmoid_gate.h) against the CPU op; the aux-loss-free
// bias update bit for bit. Statistics: the
// (2E + 1) double sums from the same counts and logits (fp32 and bf16), then
// the z-loss and the step counters from the same sums. Ragged token counts
// cross the 32-row chunks and the 1024-chunk cap; every run twice on poisoned
// outputs, bit-identical.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "kernels/moe_stats.h"
#include "kernels/sigmoid_gate.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

// Router-like inputs: logits spread over [-6, 6], counts as moe_plan's.
struct RouterInputs {
  std::vector<float> logits;
  std::vector<int32_t> counts;
};

RouterInputs router_inputs(int64_t N, int64_t E, uint64_t seed) {
  RouterInputs in;
  in.logits = random_floats(N * E, seed, -6.0f, 6.0f);
  in.counts = random_ints(2 * E, seed + 1, 0, static_cast<int32_t>(2 * N));
  return in;
}

void expect_close_f64(const std::string& what, const std::vector<double>& got,
                      const std::vector<double>& ref, double rtol) {
  REQUIRE(got.size() == ref.size());
  size_t worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - ref[i]) / std::max(1e-30, std::abs(ref[i]));
    if (!(err <= worst_err)) worst_err = err, worst = i;
  }
  INFO(what << ": worst relative error " << worst_err << " at " << worst << " (got "
            << got[worst] << ", ref " << ref[worst] << ")");
  CHECK(worst_err <= rtol);
}

}  // namespace

TEST_CASE("moe_router_sums matches the CPU op", "[cuda][moe]") {
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t N : {1, 33, 4097, 40000})
      for (int64_t E : {1, 8, 64, 300}) {
        if (emulated() && N * E > 300000) continue;
        const std::string tag = fmt::format("moe_router_sums {} N={} E={}", dtype_name(dtype), N, E);
        RouterInputs in = router_inputs(N, E, 100 * N + E);
        in.logits = round_to(in.logits, dtype);
        HostTensor logits({N, E}, in.logits, dtype);
        std::vector<int32_t> counts = in.counts;
        std::vector<double> ref(2 * E + 1, -1.0);
        cpu::moe_router_sums(cpu(), Tensor(ref.data(), {2 * E + 1}, DType::f64, Device::cpu),
                             host_ints(counts, {2, E}), logits);

        DeviceTensor dlogits({N, E}, dtype), dcounts({2, E}, DType::i32);
        dlogits.upload(in.logits);
        dcounts.upload_ints(in.counts);
        DeviceTensor sums_bytes({2 * (2 * E + 1)}, DType::f32);  // 8-byte elements
        const Tensor sums(sums_bytes.view().data, {2 * E + 1}, DType::f64, Device::cuda);
        auto run = [&] {
          sums_bytes.poison();
          cuda::moe_router_sums(gpu(), sums, dcounts, dlogits);
          return download_f64(sums);
        };
        const std::vector<double> a = run(), b = run();
        for (int64_t i = 0; i < 2 * E; ++i) REQUIRE(a[i] == ref[i]);  // the counts, exactly
        expect_close_f64(tag, a, ref, 1e-12);
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
      }
}

TEST_CASE("moe_router_losses matches the CPU op", "[cuda][moe]") {
  for (int64_t E : {1, 8, 300})
    for (bool counted : {false, true}) {
      const std::string tag = fmt::format("moe_router_losses E={}{}", E, counted ? " counted" : "");
      const int64_t tokens = 4096;
      std::vector<double> sums(2 * E + 1);
      const std::vector<float> r = random_floats(2 * E + 1, 7 * E, 0.0f, 1.0f);
      for (int64_t e = 0; e < 2 * E; ++e) sums[e] = std::floor(r[e] * tokens);
      sums[2 * E] = 3.5 * tokens + r[2 * E];
      const std::vector<float> step0 = random_floats(2 * E, E, 0.0f, 100.0f);
      const std::vector<float> aux0 = {0.25f};
      HostTensor z({1}, {0}), step({2, E}, step0), aux({1}, aux0);
      cpu::moe_router_losses(cpu(), z, counted ? step.tensor : Tensor{},
                             counted ? aux.tensor : Tensor{},
                             Tensor(sums.data(), {2 * E + 1}, DType::f64, Device::cpu), tokens,
                             0.001f);

      DeviceTensor dz({1}), dstep({2, E}), daux({1});
      DeviceTensor sums_bytes({2 * (2 * E + 1)}, DType::f32);
      const Tensor dsums(sums_bytes.view().data, {2 * E + 1}, DType::f64, Device::cuda);
      copy_from_host(dsums, sums.data());
      auto run = [&] {
        dz.poison();
        dstep.upload(step0);
        daux.upload(aux0);
        cuda::moe_router_losses(gpu(), dz, counted ? dstep.view() : Tensor{},
                                counted ? daux.view() : Tensor{}, dsums, tokens, 0.001f);
        return std::tuple{dz.download(), dstep.download(), daux.download()};
      };
      const auto [z1, s1, a1] = run();
      const auto [z2, s2, a2] = run();
      // The same doubles in, the same operations in the same order: equal bits.
      expect_same_bits(tag + " z_loss", z1, z.values());
      expect_same_bits(tag + " z_loss rerun", z1, z2);
      expect_same_bits(tag + " step", s1, step.values());
      expect_same_bits(tag + " step_aux", a1, aux.values());
    }
}

TEST_CASE("moe_bias_update matches the CPU op", "[cuda][moe]") {
  // Loads with ties at the mean (integers, as counts are), E across the block's
  // 256 threads; biases random, the rate not a power of two (one rounding).
  for (int64_t E : {int64_t{1}, int64_t{8}, int64_t{257}, int64_t{4096}}) {
    std::vector<float> load(E), bias = random_floats(E, 700 + E, -0.5f, 0.5f);
    std::vector<int32_t> ints = random_ints(E, 800 + E, 0, 6);
    for (int64_t e = 0; e < E; ++e) load[e] = static_cast<float>(ints[e]);
    std::vector<float> ref = bias;
    cpu::moe_bias_update(cpu(), Tensor(ref.data(), {E}), Tensor(load.data(), {E}), 0.003f);
    DeviceTensor gb({E}), gl({E});
    gl.upload(load);
    for (int rerun = 0; rerun < 2; ++rerun) {  // each run against the CPU's bits
      gb.upload(bias);
      cuda::moe_bias_update(gpu(), gb, gl, 0.003f);
      expect_same_bits(fmt::format("moe_bias_update E={} run {}", E, rerun), gb.download(), ref);
    }
  }
}

TEST_CASE("CUDA router statistics reject bad arguments with trainer::Error", "[cuda][moe]") {
  DeviceTensor logits({4, 3}), counts({2, 3}, DType::i32), wrong({3});
  DeviceTensor sums_bytes({14}, DType::f32);
  sums_bytes.poison();
  const Tensor sums(sums_bytes.view().data, {7}, DType::f64, Device::cuda);
  CHECK_NOTHROW(cuda::moe_router_sums(gpu(), sums, counts, logits));
  CHECK_THROWS_AS(cuda::moe_router_sums(gpu(), wrong, counts, logits), Error);
  CHECK_THROWS_AS(cuda::moe_router_sums(gpu(), sums, wrong, logits), Error);
  CHECK_THROWS_AS(cuda::moe_router_sums(gpu(), sums.slice(0, 5), counts, logits), Error);
  DeviceTensor z({1}), step({2, 3}), aux({1});
  CHECK_THROWS_AS(cuda::moe_router_losses(gpu(), z, step, {}, sums, 4, 0), Error);
  CHECK_THROWS_AS(cuda::moe_router_losses(gpu(), z, {}, {}, sums, 0, 0), Error);
  CHECK_THROWS_AS(cuda::moe_router_losses(gpu(), wrong, {}, {}, sums, 4, 0), Error);
  CHECK_NOTHROW(cuda::moe_router_losses(gpu(), z, step, aux, sums, 4, 0));
}

}  // namespace trainer::cuda_test

namespace trainer::cuda_test {

// Qwen2-MoE's gated shared expert (kernels/sigmoid_gate.h): the sigmoid is
// rounded once from double on both backends, so the scaled rows match the CPU's
// to the dtype's rounding; the gate's gradient is a row dot product.
TEST_CASE("sigmoid_gate forward/backward match the CPU op", "[cuda][moe]") {
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t N : {1, 17, 4097})
      for (int64_t C : {1, 33, 256}) {
        if (emulated() && N * C > 300000) continue;
        const std::string tag = fmt::format("sigmoid_gate {} N={} C={}", dtype_name(dtype), N, C);
        const auto y = round_to(random_floats(N * C, 3 * N + C), dtype);
        const auto dout = round_to(random_floats(N * C, 5 * N + C), dtype);
        const auto g = random_floats(N, 7 * N + C, -9.0f, 9.0f);
        HostTensor hy({N, C}, y, dtype), hdout({N, C}, dout, dtype), hg({N, 1}, g);
        HostTensor hout({N, C}, std::vector<float>(N * C), dtype),
            hdy({N, C}, std::vector<float>(N * C), dtype), hdg({N, 1}, std::vector<float>(N));
        cpu::sigmoid_gate_forward(cpu(), hout, hy, hg);
        cpu::sigmoid_gate_backward(cpu(), hdy, hdg, hdout, hy, hg);
        DeviceTensor dy_in({N, C}, dtype), ddout({N, C}, dtype), dg({N, 1}), gout({N, C}, dtype),
            ddy({N, C}, dtype), ddg({N, 1});
        dy_in.upload(y);
        ddout.upload(dout);
        dg.upload(g);
        auto run = [&] {
          gout.poison();
          ddy.poison();
          ddg.poison();
          cuda::sigmoid_gate_forward(gpu(), gout, dy_in, dg);
          cuda::sigmoid_gate_backward(gpu(), ddy, ddg, ddout, dy_in, dg);
          return std::tuple{gout.download(), ddy.download(), ddg.download()};
        };
        const auto [o1, d1, g1] = run();
        const auto [o2, d2, g2] = run();
        const Tolerance pw = narrow_tolerance(dtype, kF32Pointwise, false);
        expect_close(tag + " out", o1, hout.values(), pw);
        expect_close(tag + " dy", d1, hdy.values(), pw);
        expect_close(tag + " dgate", g1, hdg.values(), kF32Reduction);
        expect_same_bits(tag + " out rerun", o1, o2);
        expect_same_bits(tag + " dy rerun", d1, d2);
        expect_same_bits(tag + " dgate rerun", g1, g2);
      }
  DeviceTensor y({4, 3}), g({4, 1}), bad_g({3, 1}), g16({4, 1}, DType::bf16), out({4, 3});
  CHECK_THROWS_AS(cuda::sigmoid_gate_forward(gpu(), out, y, bad_g), Error);
  CHECK_THROWS_AS(cuda::sigmoid_gate_forward(gpu(), out, y, g16), Error);
  CHECK_THROWS_AS(cuda::sigmoid_gate_backward(gpu(), out, g16, out, y, g), Error);
}

}  // namespace trainer::cuda_test
