// [cuda] pointwise ops against the CPU op on the same dtypes (fp32, bf16, fp16):
// GELU, SwiGLU, RoPE (at per-token positions too) and the elementwise ops. GELU, SwiGLU and the elementwise
// ops run both kernel paths for every dtype: 16-byte packs where every tensor is
// aligned and n is whole packs of each dtype, one element per thread elsewhere,
// and for a view shifted off 16-byte alignment (one tensor at a time), which must
// give the packed run's bits.
#include "kernels/elementwise.h"
#include "kernels/head_columns.h"
#include "kernels/gelu.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

// Packed: 64 and 4096 (whole packs of fp32, bf16 and fp16). One element per
// thread: 1, 17, 4097, and 36 in 16-bit (whole fp32 packs only, so fp32 takes
// packs there and 16-bit tensors, or an fp32 / 16-bit pair, do not).
constexpr int64_t kSizes[] = {1, 17, 36, 64, 4096, 4097};
constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// A packed size, run again with each tensor in turn one element into a larger buffer.
constexpr int64_t kShiftedSize = 4096;
constexpr int kNone = -1;
int64_t offset(int shift, int tensor) { return shift == tensor ? 1 : 0; }
std::string shift_tag(int shift) {
  return shift == kNone ? "" : fmt::format(" (tensor {} shifted one element)", shift);
}

using Outputs = std::vector<std::vector<float>>;

// check(n, shift) runs one case and returns its outputs: every size unshifted,
// then kShiftedSize with each of the op's `tensors` shifted (shift = its index in
// the op's list), which takes the one-element kernel and must match the packed
// run bit for bit (each element's arithmetic is the same on both paths).
template <class F>
void for_each_layout(int tensors, const std::string& what, F&& check) {
  Outputs packed;
  for (int64_t n : kSizes) {
    Outputs r = check(n, kNone);
    if (n == kShiftedSize) packed = std::move(r);
  }
  for (int shift = 0; shift < tensors; ++shift) {
    const Outputs r = check(kShiftedSize, shift);
    REQUIRE(r.size() == packed.size());
    for (size_t i = 0; i < r.size(); ++i)
      expect_same_bits(fmt::format("{} n={} output {}{} vs aligned", what, kShiftedSize, i,
                                   shift_tag(shift)),
                       r[i], packed[i]);
  }
}

}  // namespace

TEST_CASE("gelu forward/backward match the CPU op", "[cuda][gelu]") {
  for (DType dtype : kDtypes) {
    // Shifted in turn: inp, out, dout (which backward overwrites in place).
    for_each_layout(3, fmt::format("gelu {}", dtype_name(dtype)), [&](int64_t n, int shift) {
      const auto x = round_to(random_floats(n, 10 + n, -6.0f, 6.0f), dtype);
      const auto dy = round_to(random_floats(n, 20 + n), dtype);
      HostTensor hx({n}, x, dtype), hdy({n}, dy, dtype), hy({n}, std::vector<float>(n), dtype),
          hdx({n}, std::vector<float>(n), dtype);
      cpu::gelu_forward(cpu(), hy, hx);
      cpu::gelu_backward(cpu(), hdx, hdy, hx);
      DeviceTensor gx({n}, dtype, offset(shift, 0)), gy({n}, dtype, offset(shift, 1)),
          gdy({n}, dtype, offset(shift, 2));
      gx.upload(x);
      auto run = [&] {
        gy.poison();
        gdy.upload(dy);
        cuda::gelu_forward(gpu(), gy, gx);
        cuda::gelu_backward(gpu(), gdy, gdy, gx);  // in place: dinp aliases dout
        return std::pair{gy.download(), gdy.download()};
      };
      const auto [y1, dx1] = run();
      const auto [y2, dx2] = run();
      const Tolerance tol = narrow_tolerance(dtype, kF32Pointwise, false);
      const std::string tag = fmt::format("gelu {} n={}{}", dtype_name(dtype), n, shift_tag(shift));
      expect_close(tag + " out", y1, hy.values(), tol);
      // GELU's derivative, 1 - tanh^2 in the tails, loses absolute precision on
      // both backends (the CPU's tanh approximation is good to ~1e-7): 1e-5 absolute
      // in fp32, well inside the 16-bit dtypes' own bounds.
      expect_close(tag + " dinp", dx1, hdx.values(), narrow_tolerance(dtype, kF32Reduction, false));
      expect_same_bits(tag + " rerun", y1, y2);
      expect_same_bits(tag + " rerun d", dx1, dx2);
      return Outputs{y1, dx1};
    });
  }
}

TEST_CASE("swiglu forward/backward match the CPU op", "[cuda][swiglu]") {
  for (DType dtype : kDtypes) {
    // Shifted in turn: gate, up, dout, out, dgate, dup.
    for_each_layout(6, fmt::format("swiglu {}", dtype_name(dtype)), [&](int64_t n, int shift) {
      const auto g = round_to(random_floats(n, 30 + n, -8.0f, 8.0f), dtype);
      const auto u = round_to(random_floats(n, 40 + n), dtype);
      const auto dy = round_to(random_floats(n, 50 + n), dtype);
      HostTensor hg({n, 1}, g, dtype), hu({n, 1}, u, dtype), hdy({n, 1}, dy, dtype);
      HostTensor hy({n, 1}, std::vector<float>(n), dtype), hdg({n, 1}, std::vector<float>(n), dtype),
          hdu({n, 1}, std::vector<float>(n), dtype);
      cpu::swiglu_forward(cpu(), hy, hg, hu);
      cpu::swiglu_backward(cpu(), hdg, hdu, hdy, hg, hu);
      DeviceTensor gg({n, 1}, dtype, offset(shift, 0)), gu({n, 1}, dtype, offset(shift, 1)),
          gdy({n, 1}, dtype, offset(shift, 2)), gy({n, 1}, dtype, offset(shift, 3)),
          gdg({n, 1}, dtype, offset(shift, 4)), gdu({n, 1}, dtype, offset(shift, 5));
      gg.upload(g);
      gu.upload(u);
      gdy.upload(dy);
      auto run = [&] {
        gy.poison();
        gdg.poison();
        gdu.poison();
        cuda::swiglu_forward(gpu(), gy, gg, gu);
        cuda::swiglu_backward(gpu(), gdg, gdu, gdy, gg, gu);
        return Outputs{gy.download(), gdg.download(), gdu.download()};
      };
      const auto r1 = run();
      const auto r2 = run();
      const Tolerance tol = narrow_tolerance(dtype, kF32Pointwise, false);
      const std::string tag =
          fmt::format("swiglu {} n={}{}", dtype_name(dtype), n, shift_tag(shift));
      expect_close(tag + " out", r1[0], hy.values(), tol);
      expect_close(tag + " dgate", r1[1], hdg.values(), tol);
      expect_close(tag + " dup", r1[2], hdu.values(), tol);
      for (int i = 0; i < 3; ++i) expect_same_bits(tag + " rerun", r1[i], r2[i]);
      return r1;
    });
  }
}

TEST_CASE("rope forward/backward match the CPU op", "[cuda][rope]") {
  struct Case {
    int64_t B, T, H, D, pos_offset;
    bool llama3 = false;  // Llama 3.1's scaling (factor 8, original 8192, all three bands at D 128)
    bool yarn = false;    // YaRN (factor 4, original 4096: kept, ramped and divided pairs; x 1.14)
  };
  for (DType dtype : kDtypes)
  for (const Case c : {Case{1, 1, 1, 2, 0}, Case{2, 17, 3, 8, 5}, Case{1, 4097, 2, 64, 0},
                       Case{2, 33, 4, 128, 60000}, Case{2, 17, 2, 128, 9000, true},
                       Case{2, 17, 2, 128, 9000, false, true}}) {
    const int64_t n = c.B * c.T * c.H * c.D;
    const Rope theta = c.llama3 ? Rope(500000.0f, RopeScaling{.factor = 8})
                       : c.yarn ? Rope(10000.0f, yarn_scaling(4, 4096, 32, 1, 0, c.D, 10000.0))
                                : Rope(10000.0f);
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
                                        c.B, c.T, c.H, c.D, c.pos_offset,
                                        c.llama3 ? " llama3" : c.yarn ? " yarn" : "");
    expect_close(tag + " out", y1, hy.values(), tol);
    expect_close(tag + " dinp", dx1, hdx.values(), tol);
    expect_same_bits(tag + " rerun", y1, y2);
    expect_same_bits(tag + " rerun d", dx1, dx2);
  }
}

// Documents packed into a sequence (Megatron's --reset-position-ids): every
// token at its own position, restarting at 0 at each document, large positions
// and Llama 3.1's scaling among them.
TEST_CASE("rope at per-token positions matches the CPU op", "[cuda][rope][docmask]") {
  struct Case {
    int64_t B, T, H, D;
    bool llama3;
  };
  for (DType dtype : kDtypes)
  for (const Case c : {Case{1, 1, 1, 2, false}, Case{2, 37, 3, 16, false}, Case{2, 17, 2, 128, true}}) {
    const int64_t n = c.B * c.T * c.H * c.D;
    const Rope theta = c.llama3 ? Rope(500000.0f, RopeScaling{.factor = 8}) : Rope(10000.0f);
    const auto x = round_to(random_floats(n, 90 + n), dtype);
    // Documents of random lengths (restarts), and one sequence's late part far out.
    std::vector<int32_t> pos(c.B * c.T);
    const auto restart = random_ints(c.B * c.T, 91 + n, 0, 5);
    for (int64_t i = 0; i < c.B * c.T; ++i)
      pos[i] = i % c.T == 0 || restart[i] == 0 ? 0 : pos[i - 1] + 1;
    if (c.T > 8) pos[c.T - 1] = 60000;
    HostTensor hx({c.B, c.T, c.H, c.D}, x, dtype),
        hy({c.B, c.T, c.H, c.D}, std::vector<float>(n), dtype),
        hdx({c.B, c.T, c.H, c.D}, std::vector<float>(n), dtype);
    const Tensor hpos = host_ints(pos, {c.B, c.T});
    cpu::rope_forward(cpu(), hy, hx, theta, 0, hpos);
    cpu::rope_backward(cpu(), hdx, hx, theta, 0, hpos);
    DeviceTensor gx({c.B, c.T, c.H, c.D}, dtype), gy({c.B, c.T, c.H, c.D}, dtype),
        gdx({c.B, c.T, c.H, c.D}, dtype), gpos({c.B, c.T}, DType::i32);
    gx.upload(x);
    gpos.upload_ints(pos);
    auto run = [&] {
      gy.poison();
      gdx.poison();
      cuda::rope_forward(gpu(), gy, gx, theta, 0, gpos);
      cuda::rope_backward(gpu(), gdx, gx, theta, 0, gpos);
      return std::pair{gy.download(), gdx.download()};
    };
    const auto [y1, dx1] = run();
    const auto [y2, dx2] = run();
    const Tolerance tol = narrow_tolerance(dtype, Tolerance{2e-5, 1e-4, 2e-5}, false);
    const std::string tag = fmt::format("rope positions {} B={} T={} H={} D={}{}",
                                        dtype_name(dtype), c.B, c.T, c.H, c.D,
                                        c.llama3 ? " llama3" : "");
    expect_close(tag + " out", y1, hy.values(), tol);
    expect_close(tag + " dinp", dx1, hdx.values(), tol);
    expect_same_bits(tag + " rerun", y1, y2);
    expect_same_bits(tag + " rerun d", dx1, dx2);
    CHECK_THROWS_WITH(cuda::rope_forward(gpu(), gy, gx, theta, 3, gpos),
                      Catch::Contains("positions given with pos_offset 3"));
  }
}

TEST_CASE("elementwise ops match the CPU ops", "[cuda][elementwise]") {
  for (DType dtype : kDtypes) {
    // Shifted in turn: a (accumulate's and scale's out too), b, add's out.
    for_each_layout(3, dtype_name(dtype), [&](int64_t n, int shift) {
      const auto a = round_to(random_floats(n, 70 + n), dtype);
      const auto b = round_to(random_floats(n, 80 + n), dtype);
      // One fp32 add or multiply of the same operands, then the same rounding:
      // both backends give the same bits.
      const Tolerance tol{0, 0, 0};
      const std::string tag = fmt::format("{} n={}{}", dtype_name(dtype), n, shift_tag(shift));
      HostTensor ha({n}, a, dtype), hb({n}, b, dtype), hout({n}, std::vector<float>(n), dtype);
      DeviceTensor ga({n}, dtype, offset(shift, 0)), gb({n}, dtype, offset(shift, 1)),
          gout({n}, dtype, offset(shift, 2));
      ga.upload(a);
      gb.upload(b);
      Outputs r;

      cpu::add(cpu(), hout, ha, hb);
      gout.poison();
      cuda::add(gpu(), gout, ga, gb);
      r.push_back(gout.download());
      expect_close("add " + tag, r.back(), hout.values(), tol);

      HostTensor hacc({n}, a, dtype);
      cpu::accumulate(cpu(), hacc, hb);
      cuda::accumulate(gpu(), ga, gb);  // ga += gb
      r.push_back(ga.download());
      expect_close("accumulate " + tag, r.back(), hacc.values(), tol);

      cpu::scale(cpu(), hacc, 0.37f);
      cuda::scale(gpu(), ga, 0.37f);
      r.push_back(ga.download());
      expect_close("scale " + tag, r.back(), hacc.values(), tol);

      cuda::fill(gpu(), ga, 0.0f);
      expect_same_bits("fill 0 " + tag, ga.download(), std::vector<float>(n, 0.0f));
      return r;
    });
  }
  for_each_layout(1, "fill 1.5", [&](int64_t n, int shift) {
    DeviceTensor f({n}, DType::f32, offset(shift, 0));
    f.poison();
    cuda::fill(gpu(), f, 1.5f);
    Outputs r{f.download()};
    expect_same_bits(fmt::format("fill 1.5 n={}{}", n, shift_tag(shift)), r[0],
                     std::vector<float>(n, 1.5f));
    return r;
  });
}

namespace {

// A two-tensor op on both backends, src in `from` and out in `to`, with src or
// out shifted as for_each_layout asks (0, 1): the same bits. out starts as
// `out0` (empty: zeros on the CPU and poison on the GPU, for an op that only
// writes it). Returns the CUDA op's output.
template <class CpuOp, class GpuOp>
Outputs check_pair(const std::string& what, DType from, DType to, int64_t n, int shift,
                   const std::vector<float>& src, const std::vector<float>& out0, CpuOp cpu_op,
                   GpuOp gpu_op) {
  const auto s = round_to(src, from);
  const auto o = out0.empty() ? std::vector<float>(n) : round_to(out0, to);
  HostTensor hs({n}, s, from), ho({n}, o, to);
  cpu_op(ho, hs);
  DeviceTensor gs({n}, from, offset(shift, 0)), go({n}, to, offset(shift, 1));
  gs.upload(s);
  if (out0.empty()) {
    go.poison();
  } else {
    go.upload(o);
  }
  gpu_op(go, gs);
  Outputs r{go.download()};
  expect_same_bits(fmt::format("{} n={}{}", what, n, shift_tag(shift)), r[0], ho.values());
  return r;
}

// check(what, from, to, n, shift) for every pair of fp32, bf16 and fp16 (the
// same dtype too) and every layout of its two tensors.
template <class F>
void for_each_pair(const char* op, F&& check) {
  for (DType from : kDtypes) {
    for (DType to : kDtypes) {
      const std::string what = fmt::format("{} {} -> {}", op, dtype_name(from), dtype_name(to));
      for_each_layout(2, what,
                      [&](int64_t n, int shift) { return check(what, from, to, n, shift); });
    }
  }
}

}  // namespace

// accumulate of any dtype into any (mixed precision adds 16-bit gradients into
// fp32 ones): a packed step is the narrower dtype's pack, two fp32 packs
// against one 16-bit one.
TEST_CASE("accumulate adds any dtype pair like the CPU op", "[cuda][elementwise]") {
  for_each_pair("accumulate", [](const std::string& what, DType from, DType to, int64_t n,
                                 int shift) {
    return check_pair(what, from, to, n, shift, random_floats(n, 85 + n), random_floats(n, 75 + n),
                      [](Tensor out, Tensor a) { cpu::accumulate(cpu(), out, a); },
                      [](Tensor out, Tensor a) { cuda::accumulate(gpu(), out, a); });
  });
}

// copy between every pair of fp32, bf16 and fp16 (the same dtype too): one
// rounding to nearest even from the exact fp32 value, the CPU op's bits.
TEST_CASE("copy converts like the CPU op", "[cuda][elementwise]") {
  for_each_pair("copy", [](const std::string& what, DType from, DType to, int64_t n, int shift) {
    // Values past fp16's range and below its normals exercise overflow and subnormals.
    auto x = random_floats(n, 90 + n);
    for (int64_t i = 0; i < n; i += 3) x[i] *= i % 2 ? 1e5f : 1e-6f;
    return check_pair(what, from, to, n, shift, x, {},
                      [](Tensor dst, Tensor src) { cpu::copy(cpu(), dst, src); },
                      [](Tensor dst, Tensor src) { cuda::copy(gpu(), dst, src); });
  });
}

// Multi-head latent attention's column blocks (kernels/head_columns.h): head
// to head, one head broadcast to all, all summed into one, from and into
// f32/bf16 tensors, on rows crossing the launch grid; the columns it does not
// write keep their values. Copies and the head-ordered fp32 sum are the CPU's bits.
TEST_CASE("copy_head_columns matches the CPU op bit for bit", "[cuda][elementwise]") {
  struct Mode {
    int64_t out_heads, in_heads;
  };
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t R : {1, 17, 4097})
      for (Mode m : {Mode{5, 5}, Mode{5, 1}, Mode{1, 5}}) {
        const int64_t Do = 24, Di = 40, width = 9, out_col = 13, in_col = 30;
        const std::string tag = fmt::format("copy_head_columns {} R={} heads {} <- {}",
                                            dtype_name(dtype), R, m.out_heads, m.in_heads);
        const auto x = round_to(random_floats(R * m.in_heads * Di, 11 * R + m.in_heads), dtype);
        const auto before = round_to(random_floats(R * m.out_heads * Do, 13 * R + m.out_heads), dtype);
        HostTensor hx({R, m.in_heads, Di}, x, dtype), hout({R, m.out_heads, Do}, before, dtype);
        cpu::copy_head_columns(cpu(), hout, out_col, hx, in_col, width);
        DeviceTensor dx({R, m.in_heads, Di}, dtype), dout({R, m.out_heads, Do}, dtype);
        dx.upload(x);
        auto run = [&] {
          dout.upload(before);
          cuda::copy_head_columns(gpu(), dout, out_col, dx, in_col, width);
          return dout.download();
        };
        const auto first = run();
        expect_same_bits(tag, first, hout.values());
        expect_same_bits(tag + " rerun", run(), first);
      }
  DeviceTensor a({4, 2, 8}), b({4, 3, 8}), c({3, 2, 8});
  CHECK_THROWS_AS(cuda::copy_head_columns(gpu(), a, 0, b, 0, 4), Error);  // 2 heads from 3
  CHECK_THROWS_AS(cuda::copy_head_columns(gpu(), a, 0, c, 0, 4), Error);  // rows differ
  CHECK_THROWS_AS(cuda::copy_head_columns(gpu(), a, 6, a, 0, 4), Error);  // past the columns
}

}  // namespace trainer::cuda_test
