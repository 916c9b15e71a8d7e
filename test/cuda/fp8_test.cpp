// [cuda][fp8]: the fp8 ops of mixed precision's fp8 mode against the CPU op: cast +
// transpose bit for bit (every source dtype into both fp8 formats, scaled or not,
// ragged tile edges, specials), and the FP8 linear layer's three cuBLASLt GEMMs
// against the CPU op's dequantised fp32 GEMMs on the same codes and scales.
#include <cmath>
#include <limits>

#include "kernels/cast.h"
#include "kernels/cast_transpose.h"
#include "kernels/fp8_linear.h"
#include "kernels/fp8_update.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

// Values across fp8's ranges with zeros, subnormals, saturation, inf and NaN.
std::vector<float> quantisable(int64_t n, uint64_t seed) {
  auto v = random_floats(n, seed, -2.0f, 2.0f);
  const float specials[] = {0.0f, -0.0f, 1e-9f, 3e-3f, 500.0f, -7e4f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (int64_t i = 0; i < n; ++i) {
    if (i % 11 == 5) v[i] = specials[(i / 11) % std::size(specials)];
    else if (i % 7 == 2) v[i] *= std::ldexp(1.0f, static_cast<int>(i % 24) - 12);
  }
  return v;
}

// fp8 codes of `values` quantised with `scale` by the CPU op.
std::vector<unsigned char> quantise(const std::vector<float>& values, int64_t rows, int64_t cols,
                                    DType format, float scale) {
  std::vector<float> copy = values, s = {scale};
  std::vector<unsigned char> codes(values.size());
  Tensor src(copy.data(), {rows, cols}), dst(codes.data(), {rows, cols}, format, Device::cpu);
  cpu::cast(cpu(), dst, src, Tensor(s.data(), {1}, DType::f32, Device::cpu));
  return codes;
}

// The transpose of a (rows, cols) byte matrix.
std::vector<unsigned char> transposed(const std::vector<unsigned char>& m, int64_t rows,
                                      int64_t cols) {
  std::vector<unsigned char> t(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

}  // namespace

TEST_CASE("cast_transpose matches the CPU op bit for bit", "[cuda][fp8]") {
  struct Case {
    int64_t R, C;
  };
  for (const Case c : {Case{1, 1}, Case{17, 33}, Case{64, 4097}, Case{4097, 48}}) {
    const auto x = quantisable(c.R * c.C, 800 + c.C);
    for (DType from : {DType::f32, DType::bf16, DType::f16}) {
      const auto src = round_to(x, from);
      HostTensor hsrc({c.R, c.C}, src, from);
      DeviceTensor gsrc({c.R, c.C}, from);
      gsrc.upload(src);
      for (DType to : {DType::e4m3, DType::e5m2}) {
        for (bool scaled : {false, true}) {
          for (bool both : {false, true}) {
            const std::string tag = fmt::format("cast_transpose {} -> {} ({}x{}) scaled={} out={}",
                                                dtype_name(from), dtype_name(to), c.R, c.C,
                                                scaled, both);
            std::vector<float> s = {to == DType::e4m3 ? 37.5f : 0.3f};
            Tensor hscale(s.data(), {1}, DType::f32, Device::cpu);
            DeviceTensor gscale({1});
            gscale.upload(s);
            std::vector<unsigned char> ref(c.R * c.C), ref_t(c.R * c.C);
            Tensor hout(ref.data(), {c.R, c.C}, to, Device::cpu);
            Tensor hout_t(ref_t.data(), {c.C, c.R}, to, Device::cpu);
            cpu::cast_transpose(cpu(), both ? hout : Tensor{}, hout_t, hsrc,
                                scaled ? hscale : Tensor{});
            DeviceTensor gout({c.R, c.C}, to), gout_t({c.C, c.R}, to);
            auto run = [&] {
              gout.poison();
              gout_t.poison();
              cuda::cast_transpose(gpu(), both ? gout.view() : Tensor{}, gout_t, gsrc,
                                   scaled ? gscale.view() : Tensor{});
              return std::pair{gout.download_bytes(), gout_t.download_bytes()};
            };
            const auto [o1, t1] = run();
            const auto [o2, t2] = run();
            INFO(tag);
            CHECK(t1 == ref_t);
            CHECK(t1 == t2);
            if (both) {
              CHECK(o1 == ref);
              CHECK(o1 == o2);
            } else {
              // Left untouched: still the poison.
              CHECK(o1 == std::vector<unsigned char>(o1.size(), 0xFF));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("fp8 linear GEMMs match the CPU op on the same codes", "[cuda][fp8]") {
  struct Case {
    int64_t M, K, N;
    bool bias, dinp;
  };
  // cuBLASLt's FP8 GEMMs run with fp32 accumulation at tensor-core precision (the
  // forward without promotion): closer than fp8 itself, looser than a 16-bit GEMM.
  const Tolerance kFp8Gemm{2e-2, 5e-2, 2e-2};
  for (const Case c : {Case{16, 16, 16, true, true}, Case{48, 64, 32, false, true},
                       Case{256, 192, 64, true, false}, Case{4096, 32, 48, true, true}}) {
    for (DType act : {DType::bf16, DType::f32}) {
      // Scales as delayed scaling picks them: format max over the amax.
      const float sx = 448.0f / 2.0f, sw = 448.0f / 0.5f, sg = 57344.0f / 1.0f;
      const auto x = quantise(random_floats(c.M * c.K, 900), c.M, c.K, DType::e4m3, sx);
      const auto w = quantise(random_floats(c.N * c.K, 901, -0.5f, 0.5f), c.N, c.K, DType::e4m3, sw);
      const auto g = quantise(random_floats(c.M * c.N, 902), c.M, c.N, DType::e5m2, sg);
      const auto x_t = transposed(x, c.M, c.K), w_t = transposed(w, c.N, c.K),
                 g_t = transposed(g, c.M, c.N);
      const auto b = random_floats(c.N, 903);
      const auto dw0 = random_floats(c.N * c.K, 904), db0 = random_floats(c.N, 905);
      std::vector<float> inv = {1.0f / sx, 1.0f / sw, 1.0f / sg};

      // CPU reference: the same codes, dequantised, through the fp32 linear layer.
      auto host_codes = [](std::vector<unsigned char>& v, int64_t r, int64_t k, DType d) {
        return Tensor(v.data(), {r, k}, d, Device::cpu);
      };
      auto hx = x, hw = w, hg = g, hx_t = x_t, hw_t = w_t, hg_t = g_t;
      Tensor hsx(&inv[0], {1}), hsw(&inv[1], {1}), hsg(&inv[2], {1});
      HostTensor hb({c.N}, b), hy({c.M, c.N}, std::vector<float>(c.M * c.N), act),
          hdx({c.M, c.K}, std::vector<float>(c.M * c.K), act), hdw({c.N, c.K}, dw0),
          hdb({c.N}, db0);
      cpu::fp8_linear_forward(cpu(), hy, host_codes(hx, c.M, c.K, DType::e4m3), hsx,
                              host_codes(hw, c.N, c.K, DType::e4m3), hsw,
                              c.bias ? Tensor(hb) : Tensor{});
      cpu::fp8_linear_backward(cpu(), c.dinp ? Tensor(hdx) : Tensor{}, hdw,
                               c.bias ? Tensor(hdb) : Tensor{},
                               host_codes(hg, c.M, c.N, DType::e5m2), host_codes(hg_t, c.N, c.M, DType::e5m2),
                               hsg, host_codes(hx_t, c.K, c.M, DType::e4m3), hsx,
                               host_codes(hw_t, c.K, c.N, DType::e4m3), hsw);

      DeviceTensor gx({c.M, c.K}, DType::e4m3), gw({c.N, c.K}, DType::e4m3),
          gg({c.M, c.N}, DType::e5m2), gx_t({c.K, c.M}, DType::e4m3), gw_t({c.K, c.N}, DType::e4m3),
          gg_t({c.N, c.M}, DType::e5m2), ginv({3}), gb({c.N}), gy({c.M, c.N}, act),
          gdx({c.M, c.K}, act), gdw({c.N, c.K}), gdb({c.N});
      gx.upload_bytes(x);
      gw.upload_bytes(w);
      gg.upload_bytes(g);
      gx_t.upload_bytes(x_t);
      gw_t.upload_bytes(w_t);
      gg_t.upload_bytes(g_t);
      ginv.upload(inv);
      gb.upload(b);
      auto factor = [&](int i) {
        Tensor t = ginv.view();
        return Tensor(static_cast<float*>(t.data) + i, {1}, DType::f32, Device::cuda);
      };
      auto run = [&] {
        gy.poison();
        gdx.poison();
        gdw.upload(dw0);
        gdb.upload(db0);
        cuda::fp8_linear_forward(gpu(), gy, gx, factor(0), gw, factor(1),
                                 c.bias ? gb.view() : Tensor{});
        cuda::fp8_linear_backward(gpu(), c.dinp ? gdx.view() : Tensor{}, gdw,
                                  c.bias ? gdb.view() : Tensor{}, gg, gg_t, factor(2), gx_t,
                                  factor(0), gw_t, factor(1));
        return std::vector<std::vector<float>>{gy.download(), gdx.download(), gdw.download(),
                                               gdb.download()};
      };
      const auto r1 = run();
      const auto r2 = run();
      const std::string tag = fmt::format("fp8 linear -> {} M={} K={} N={} bias={} dinp={}",
                                          dtype_name(act), c.M, c.K, c.N, c.bias, c.dinp);
      expect_close(tag + " out", r1[0], hy.values(), kFp8Gemm);
      if (c.dinp) expect_close(tag + " dinp", r1[1], hdx.values(), kFp8Gemm);
      expect_close(tag + " dweight", r1[2], hdw.data, kFp8Gemm);
      // dbias: fp32 sums of the same dequantised values (no tensor cores).
      if (c.bias) expect_close(tag + " dbias", r1[3], hdb.data, kF32LongSum);
      else expect_same_bits(tag + " dbias untouched", r1[3], db0);
      for (int i = 0; i < 4; ++i) expect_same_bits(tag + " rerun " + std::to_string(i), r1[i], r2[i]);
      if (c.bias && act != DType::f32) {  // the bias's fp32 staging in 16-row blocks
        const ScopedStaging blocks(kStagingModes[2]);
        expect_close(tag + " out, " + staging_mode_name(), run()[0], hy.values(), kFp8Gemm);
      }
    }
  }
}

TEST_CASE("fp8_scaling_update matches the CPU op bit for bit", "[cuda][fp8]") {
  // Histories with zeros, NaN, inf and amaxes tiny enough that the quotient
  // overflows (FLT_MAX); both formats' numerators with margins 0 and 3. Each
  // case runs three updates in a row (the rolled history feeds the next), each
  // against the CPU op's bits.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.0f, nan, inf, 1e-39f, 3e-3f, 448.0f, 7e4f};
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{4097}})
    for (int64_t H : {int64_t{1}, int64_t{4}, int64_t{1024}}) {
      if (n * H > 1 << 20) continue;  // the largest history at n 17 and 1 is enough
      std::vector<float> hist = random_floats(n * H, 900 + n + H, 0.0f, 8.0f);
      for (int64_t i = 0; i < n * H; ++i)
        if (i % 13 == 4) hist[i] = specials[(i / 13) % std::size(specials)];
      std::vector<float> scale = random_floats(n, 950 + n, 0.5f, 4.0f), inv(n), top(n);
      for (int64_t i = 0; i < n; ++i) {
        inv[i] = 1.0f / scale[i];
        top[i] = std::ldexp(i % 2 ? 57344.0f : 448.0f, -static_cast<int>(i % 5 == 3) * 3);
      }
      DeviceTensor gh({H, n}), gs({n}), gi({n}), gt({n});
      gh.upload(hist);
      gs.upload(scale);
      gi.upload(inv);
      gt.upload(top);
      for (int run = 0; run < 3; ++run) {
        cpu::fp8_scaling_update(cpu(), Tensor(hist.data(), {H, n}), Tensor(scale.data(), {n}),
                                Tensor(inv.data(), {n}), Tensor(top.data(), {n}));
        cuda::fp8_scaling_update(gpu(), gh, gs, gi, gt);
        const std::string tag = fmt::format("fp8_scaling_update n={} H={} run {}", n, H, run);
        expect_same_bits(tag + " history", gh.download(), hist);
        expect_same_bits(tag + " scale", gs.download(), scale);
        expect_same_bits(tag + " scale_inv", gi.download(), inv);
      }
    }
  DeviceTensor gh({4, 3}), gs({3}), wrong({2}), bytes({3}, DType::bf16);
  CHECK_THROWS_AS(cuda::fp8_scaling_update(gpu(), gh, gs, gs, wrong), Error);
  CHECK_THROWS_AS(cuda::fp8_scaling_update(gpu(), gh, gs, bytes, gs), Error);
}

}  // namespace trainer::cuda_test
