// [cuda] pointwise ops against the CPU op on the same dtypes (fp32, bf16, fp16):
// GELU, SwiGLU, RoPE and the elementwise ops, ragged sizes (1, 17, 4097).
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

constexpr int64_t kSizes[] = {1, 17, 4097};
constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("gelu forward/backward match the CPU op", "[cuda][gelu]") {
  for (DType dtype : kDtypes) {
    for (int64_t n : kSizes) {
      const auto x = round_to(random_floats(n, 10 + n, -6.0f, 6.0f), dtype);
      const auto dy = round_to(random_floats(n, 20 + n), dtype);
      HostTensor hx({n}, x, dtype), hdy({n}, dy, dtype), hy({n}, std::vector<float>(n), dtype),
          hdx({n}, std::vector<float>(n), dtype);
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
      const Tolerance tol = narrow_tolerance(dtype, kF32Pointwise, false);
      const std::string tag = fmt::format("gelu {} n={}", dtype_name(dtype), n);
      expect_close(tag + " out", y1, hy.values(), tol);
      // GELU's derivative, 1 - tanh^2 in the tails, loses absolute precision on
      // both backends (the CPU's tanh approximation is good to ~1e-7): 1e-5 absolute
      // in fp32, well inside the 16-bit dtypes' own bounds.
      expect_close(tag + " dinp", dx1, hdx.values(), narrow_tolerance(dtype, kF32Reduction, false));
      expect_same_bits(tag + " rerun", y1, y2);
      expect_same_bits(tag + " rerun d", dx1, dx2);
    }
  }
}

TEST_CASE("swiglu forward/backward match the CPU op", "[cuda][swiglu]") {
  for (DType dtype : kDtypes) {
    for (int64_t n : kSizes) {
      const auto g = round_to(random_floats(n, 30 + n, -8.0f, 8.0f), dtype);
      const auto u = round_to(random_floats(n, 40 + n), dtype);
      const auto dy = round_to(random_floats(n, 50 + n), dtype);
      HostTensor hg({n, 1}, g, dtype), hu({n, 1}, u, dtype), hdy({n, 1}, dy, dtype);
      HostTensor hy({n, 1}, std::vector<float>(n), dtype), hdg({n, 1}, std::vector<float>(n), dtype),
          hdu({n, 1}, std::vector<float>(n), dtype);
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
      const Tolerance tol = narrow_tolerance(dtype, kF32Pointwise, false);
      const std::string tag = fmt::format("swiglu {} n={}", dtype_name(dtype), n);
      expect_close(tag + " out", r1[0], hy.values(), tol);
      expect_close(tag + " dgate", r1[1], hdg.values(), tol);
      expect_close(tag + " dup", r1[2], hdu.values(), tol);
      for (int i = 0; i < 3; ++i) expect_same_bits(tag + " rerun", r1[i], r2[i]);
    }
  }
}

TEST_CASE("rope forward/backward match the CPU op", "[cuda][rope]") {
  struct Case {
    int64_t B, T, H, D, pos_offset;
    bool llama3 = false;  // Llama 3.1's scaling (factor 8, original 8192, all three bands at D 128)
  };
  for (DType dtype : kDtypes)
  for (const Case c : {Case{1, 1, 1, 2, 0}, Case{2, 17, 3, 8, 5}, Case{1, 4097, 2, 64, 0},
                       Case{2, 33, 4, 128, 60000}, Case{2, 17, 2, 128, 9000, true}}) {
    const int64_t n = c.B * c.T * c.H * c.D;
    const Rope theta = c.llama3 ? Rope(500000.0f, RopeScaling{.factor = 8}) : Rope(10000.0f);
    const auto x = round_to(random_floats(n, 60 + n), dtype);
    HostTensor hx({c.B, c.T, c.H, c.D}, x, dtype),
        hy({c.B, c.T, c.H, c.D}, std::vector<float>(n), dtype),
        hdx({c.B, c.T, c.H, c.D}, std::vector<float>(n), dtype);
    cpu::rope_forward(cpu(), hy, hx, theta, c.pos_offset);
    cpu::rope_backward(cpu(), hdx, hx, theta, c.pos_offset);
    DeviceTensor gx({c.B, c.T, c.H, c.D}, dtype), gy({c.B, c.T, c.H, c.D}, dtype),
        gdx({c.B, c.T, c.H, c.D}, dtype);
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
    // Angles up to 6e4 rad: the CPU's own angle rounding sets the floor in fp32
    // (2e-5 absolute), far below a 16-bit ulp.
    const Tolerance tol = narrow_tolerance(dtype, Tolerance{2e-5, 1e-4, 2e-5}, false);
    const std::string tag = fmt::format("rope {} B={} T={} H={} D={} pos={}{}", dtype_name(dtype),
                                        c.B, c.T, c.H, c.D, c.pos_offset, c.llama3 ? " llama3" : "");
    expect_close(tag + " out", y1, hy.values(), tol);
    expect_close(tag + " dinp", dx1, hdx.values(), tol);
    expect_same_bits(tag + " rerun", y1, y2);
    expect_same_bits(tag + " rerun d", dx1, dx2);
  }
}

TEST_CASE("elementwise ops match the CPU ops", "[cuda][elementwise]") {
  for (DType dtype : kDtypes) {
    for (int64_t n : kSizes) {
      const auto a = round_to(random_floats(n, 70 + n), dtype);
      const auto b = round_to(random_floats(n, 80 + n), dtype);
      // One fp32 add or multiply of the same operands, then the same rounding:
      // both backends give the same bits.
      const Tolerance tol{0, 0, 0};
      const std::string tag = fmt::format("{} n={}", dtype_name(dtype), n);
      HostTensor ha({n}, a, dtype), hb({n}, b, dtype), hout({n}, std::vector<float>(n), dtype);
      DeviceTensor ga({n}, dtype), gb({n}, dtype), gout({n}, dtype);
      ga.upload(a);
      gb.upload(b);

      cpu::add(cpu(), hout, ha, hb);
      gout.poison();
      cuda::add(gpu(), gout, ga, gb);
      expect_close("add " + tag, gout.download(), hout.values(), tol);

      HostTensor hacc({n}, a, dtype);
      cpu::accumulate(cpu(), hacc, hb);
      cuda::accumulate(gpu(), ga, gb);  // ga += gb
      expect_close("accumulate " + tag, ga.download(), hacc.values(), tol);

      cpu::scale(cpu(), hacc, 0.37f);
      cuda::scale(gpu(), ga, 0.37f);
      expect_close("scale " + tag, ga.download(), hacc.values(), tol);

      cuda::fill(gpu(), ga, 0.0f);
      expect_same_bits("fill 0 " + tag, ga.download(), std::vector<float>(n, 0.0f));
    }
  }
  for (int64_t n : kSizes) {
    DeviceTensor f({n});
    f.poison();
    cuda::fill(gpu(), f, 1.5f);
    expect_same_bits("fill 1.5", f.download(), std::vector<float>(n, 1.5f));
  }
}

// copy between every pair of fp32, bf16 and fp16 (the same dtype too): one
// rounding to nearest even from the exact fp32 value, the CPU op's bits.
TEST_CASE("copy converts like the CPU op", "[cuda][elementwise]") {
  for (int64_t n : kSizes) {
    // Values past fp16's range and below its normals exercise overflow and subnormals.
    auto x = random_floats(n, 90 + n);
    for (int64_t i = 0; i < n; i += 3) x[i] *= i % 2 ? 1e5f : 1e-6f;
    for (DType from : kDtypes) {
      const auto src = round_to(x, from);
      HostTensor hsrc({n}, src, from);
      DeviceTensor gsrc({n}, from);
      gsrc.upload(src);
      for (DType to : kDtypes) {
        HostTensor hdst({n}, std::vector<float>(n), to);
        cpu::copy(cpu(), hdst, hsrc);
        DeviceTensor gdst({n}, to);
        gdst.poison();
        cuda::copy(gpu(), gdst, gsrc);
        expect_same_bits(fmt::format("copy {} -> {} n={}", dtype_name(from), dtype_name(to), n),
                         gdst.download(), hdst.values());
      }
    }
  }
}

}  // namespace trainer::cuda_test
