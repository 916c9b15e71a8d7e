// [cuda] pointwise ops against the CPU op: GELU, SwiGLU, RoPE and the elementwise
// ops, ragged sizes (1, 17, 4097), fp32 (and bf16 inputs where the op takes them).
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

constexpr int64_t kSizes[] = {1, 17, 4097};

std::vector<float> maybe_round(std::vector<float> v, DType dtype) {
  return dtype == DType::bf16 ? round_bf16(std::move(v)) : v;
}

}  // namespace

TEST_CASE("gelu forward/backward match the CPU op", "[cuda][gelu]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : kSizes) {
      const auto x = maybe_round(random_floats(n, 10 + n, -6.0f, 6.0f), dtype);
      const auto dy = maybe_round(random_floats(n, 20 + n), dtype);
      HostTensor hx({n}, x), hdy({n}, dy), hy({n}, std::vector<float>(n)), hdx({n}, std::vector<float>(n));
      cpu::gelu_forward(cpu(), hy, hx);
      cpu::gelu_backward(cpu(), hdx, hdy, hx);
      DeviceTensor gx({n}, dtype), gdy({n}, dtype), gy({n}, dtype), gdx({n}, dtype);
      gx.upload(x);
      auto run = [&] {
        gy.poison();
        gdx.poison();
        gdy.upload(dy);
        cuda::gelu_forward(gpu(), gy, gx);
        cuda::gelu_backward(gpu(), gdy, gdy, gx);  // in place: dinp aliases dout
        return std::pair{gy.download(), gdy.download()};
      };
      const auto [y1, dx1] = run();
      const auto [y2, dx2] = run();
      const Tolerance tol = dtype == DType::bf16 ? kBf16Pointwise : kF32Pointwise;
      const std::string tag = fmt::format("gelu {} n={}", dtype_name(dtype), n);
      expect_close(tag + " out", y1, hy.data, tol);
      // GELU's derivative, 1 - tanh^2 in the tails, loses absolute precision on
      // both backends (the CPU's tanh approximation is good to ~1e-7): 1e-5 absolute.
      expect_close(tag + " dinp", dx1, hdx.data, dtype == DType::bf16 ? tol : kF32Reduction);
      expect_same_bits(tag + " rerun", y1, y2);
      expect_same_bits(tag + " rerun d", dx1, dx2);
    }
  }
}

TEST_CASE("swiglu forward/backward match the CPU op", "[cuda][swiglu]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : kSizes) {
      const auto g = maybe_round(random_floats(n, 30 + n, -8.0f, 8.0f), dtype);
      const auto u = maybe_round(random_floats(n, 40 + n), dtype);
      const auto dy = maybe_round(random_floats(n, 50 + n), dtype);
      HostTensor hg({n, 1}, g), hu({n, 1}, u), hdy({n, 1}, dy);
      HostTensor hy({n, 1}, std::vector<float>(n)), hdg({n, 1}, std::vector<float>(n)),
          hdu({n, 1}, std::vector<float>(n));
      cpu::swiglu_forward(cpu(), hy, hg, hu);
      cpu::swiglu_backward(cpu(), hdg, hdu, hdy, hg, hu);
      DeviceTensor gg({n, 1}, dtype), gu({n, 1}, dtype), gdy({n, 1}, dtype), gy({n, 1}, dtype),
          gdg({n, 1}, dtype), gdu({n, 1}, dtype);
      gg.upload(g);
      gu.upload(u);
      gdy.upload(dy);
      auto run = [&] {
        gy.poison();
        gdg.poison();
        gdu.poison();
        cuda::swiglu_forward(gpu(), gy, gg, gu);
        cuda::swiglu_backward(gpu(), gdg, gdu, gdy, gg, gu);
        return std::vector<std::vector<float>>{gy.download(), gdg.download(), gdu.download()};
      };
      const auto r1 = run();
      const auto r2 = run();
      const Tolerance tol = dtype == DType::bf16 ? kBf16Pointwise : kF32Pointwise;
      const std::string tag = fmt::format("swiglu {} n={}", dtype_name(dtype), n);
      expect_close(tag + " out", r1[0], hy.data, tol);
      expect_close(tag + " dgate", r1[1], hdg.data, tol);
      expect_close(tag + " dup", r1[2], hdu.data, tol);
      for (int i = 0; i < 3; ++i) expect_same_bits(tag + " rerun", r1[i], r2[i]);
    }
  }
}

TEST_CASE("rope forward/backward match the CPU op", "[cuda][rope]") {
  struct Case {
    int64_t B, T, H, D, pos_offset;
  };
  for (const Case c : {Case{1, 1, 1, 2, 0}, Case{2, 17, 3, 8, 5}, Case{1, 4097, 2, 64, 0},
                       Case{2, 33, 4, 128, 60000}}) {
    const int64_t n = c.B * c.T * c.H * c.D;
    const float theta = 10000.0f;
    const auto x = random_floats(n, 60 + n);
    HostTensor hx({c.B, c.T, c.H, c.D}, x), hy({c.B, c.T, c.H, c.D}, std::vector<float>(n)),
        hdx({c.B, c.T, c.H, c.D}, std::vector<float>(n));
    cpu::rope_forward(cpu(), hy, hx, theta, c.pos_offset);
    cpu::rope_backward(cpu(), hdx, hx, theta, c.pos_offset);
    DeviceTensor gx({c.B, c.T, c.H, c.D}), gy({c.B, c.T, c.H, c.D}), gdx({c.B, c.T, c.H, c.D});
    gx.upload(x);
    auto run = [&] {
      gy.poison();
      gdx.poison();
      cuda::rope_forward(gpu(), gy, gx, theta, c.pos_offset);
      cuda::rope_backward(gpu(), gdx, gx, theta, c.pos_offset);
      return std::pair{gy.download(), gdx.download()};
    };
    const auto [y1, dx1] = run();
    const auto [y2, dx2] = run();
    // Angles up to 6e4 rad: the CPU's own angle rounding sets the floor.
    const Tolerance tol{2e-5, 1e-4, 2e-5};
    const std::string tag = fmt::format("rope B={} T={} H={} D={} pos={}", c.B, c.T, c.H, c.D,
                                        c.pos_offset);
    expect_close(tag + " out", y1, hy.data, tol);
    expect_close(tag + " dinp", dx1, hdx.data, tol);
    expect_same_bits(tag + " rerun", y1, y2);
    expect_same_bits(tag + " rerun d", dx1, dx2);
  }
}

TEST_CASE("elementwise ops match the CPU ops", "[cuda][elementwise]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : kSizes) {
      const auto a = maybe_round(random_floats(n, 70 + n), dtype);
      const auto b = maybe_round(random_floats(n, 80 + n), dtype);
      const Tolerance tol = dtype == DType::bf16 ? kBf16Pointwise : Tolerance{0, 0, 0};
      const std::string tag = fmt::format("{} n={}", dtype_name(dtype), n);
      HostTensor ha({n}, a), hb({n}, b), hout({n}, std::vector<float>(n));
      DeviceTensor ga({n}, dtype), gb({n}, dtype), gout({n}, dtype);
      ga.upload(a);
      gb.upload(b);

      cpu::add(cpu(), hout, ha, hb);
      gout.poison();
      cuda::add(gpu(), gout, ga, gb);
      expect_close("add " + tag, gout.download(), hout.data, tol);

      HostTensor hacc({n}, a);
      cpu::accumulate(cpu(), hacc, hb);
      cuda::accumulate(gpu(), ga, gb);  // ga += gb
      expect_close("accumulate " + tag, ga.download(), hacc.data, tol);

      cpu::scale(cpu(), hacc, 0.37f);
      cuda::scale(gpu(), ga, 0.37f);
      expect_close("scale " + tag, ga.download(), hacc.data, tol);

      cuda::fill(gpu(), ga, 0.0f);
      expect_same_bits("fill 0 " + tag, ga.download(), std::vector<float>(n, 0.0f));
    }
    // fill with a value and the fp32 <-> bf16 conversions of copy.
    for (int64_t n : kSizes) {
      DeviceTensor f({n}), h({n}, DType::bf16), back({n});
      f.poison();
      cuda::fill(gpu(), f, 1.5f);
      expect_same_bits("fill 1.5", f.download(), std::vector<float>(n, 1.5f));
      const auto x = random_floats(n, 90 + n);
      f.upload(x);
      h.poison();
      cuda::copy(gpu(), h, f);
      expect_same_bits("copy fp32 -> bf16 rounds to nearest even", h.download(), round_bf16(x));
      back.poison();
      cuda::copy(gpu(), back, h);
      expect_same_bits("copy bf16 -> fp32", back.download(), round_bf16(x));
      DeviceTensor same({n});
      same.poison();
      cuda::copy(gpu(), same, f);
      expect_same_bits("copy fp32 -> fp32", same.download(), x);
    }
  }
}

}  // namespace trainer::cuda_test
