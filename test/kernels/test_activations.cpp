// gelu, swiglu, the sigmoid gate, rope and the elementwise ops against double references.
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/rope.h"
#include "kernels/sigmoid_gate.h"
#include "kernels/swiglu.h"

#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

std::vector<double> ref_gelu(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  const double k = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = 0.5 * x[i] * (1.0 + std::tanh(k * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return y;
}

std::vector<double> ref_swiglu(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> y(g.size());
  for (size_t i = 0; i < g.size(); ++i) y[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return y;
}

// Llama 3.1's frequencies as transformers' _compute_llama3_parameters writes
// them (torch.where over the three bands), for the reference below.
std::vector<double> llama3_freqs(double theta, int64_t D, const RopeScaling& s) {
  std::vector<double> f(static_cast<size_t>(D / 2));
  const double low_wavelen = s.original_max_positions / s.low_freq_factor;
  const double high_wavelen = s.original_max_positions / s.high_freq_factor;
  for (int64_t i = 0; i < D / 2; ++i) {
    const double inv = std::pow(theta, -2.0 * i / D), wavelen = 2 * M_PI / inv;
    const double llama = wavelen > low_wavelen ? inv / s.factor : inv;
    const double smooth = (s.original_max_positions / wavelen - s.low_freq_factor) /
                          (s.high_freq_factor - s.low_freq_factor);
    const double smoothed = (1 - smooth) * llama / s.factor + smooth * llama;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f[static_cast<size_t>(i)] = medium ? smoothed : llama;
  }
  return f;
}

// YaRN's frequencies and attention factor as transformers'
// _compute_yarn_parameters writes them (truncate true, no mscale).
std::pair<std::vector<double>, double> yarn_freqs(double theta, int64_t D, double factor, double original,
                                                  double beta_fast, double beta_slow) {
  auto dim_of = [&](double rotations) { return D * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(theta)); };
  const double low = std::max(std::floor(dim_of(beta_fast)), 0.0);
  double high = std::min(std::ceil(dim_of(beta_slow)), double(D - 1));
  if (low == high) high += 0.001;
  std::vector<double> f(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) {
    const double extrapolation = std::pow(theta, -2.0 * i / D), interpolation = extrapolation / factor;
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0), keep = 1 - ramp;
    f[static_cast<size_t>(i)] = interpolation * (1 - keep) + extrapolation * keep;
  }
  return {f, 0.1 * std::log(factor) + 1.0};
}

std::vector<double> ref_rope(const std::vector<double>& x, int64_t B, int64_t T, int64_t H,
                             int64_t D, double theta, int64_t pos_offset, const RopeScaling* s = nullptr,
                             const std::vector<double>* given = nullptr, double magnitude = 1.0) {
  std::vector<double> freqs(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) freqs[static_cast<size_t>(i)] = std::pow(theta, -2.0 * i / D);
  if (s) freqs = llama3_freqs(theta, D, *s);
  if (given) freqs = *given;
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = (pos_offset + t) * freqs[static_cast<size_t>(i)];
          const int64_t o = ((b * T + t) * H + h) * D;
          const double x1 = x[o + i], x2 = x[o + i + D / 2];
          y[o + i] = magnitude * (x1 * std::cos(a) - x2 * std::sin(a));
          y[o + i + D / 2] = magnitude * (x2 * std::cos(a) + x1 * std::sin(a));
        }
  return y;
}

}  // namespace

TEST_CASE("gelu matches the double reference and finite differences", "[cpu][gelu]") {
  Context ctx;
  for (int64_t n : {1, 17, 300}) {
    auto x = random_floats(n, 41, -6.0f, 6.0f), dy = random_floats(n, 42);
    x[0] = -12.0f;  // the saturated tails
    if (n > 1) x[1] = 12.0f;
    std::vector<float> y(n), dx(n);
    cpu::gelu_forward(ctx, view(y, {n}), view(x, {n}));
    const auto xd = to_double(x), dyd = to_double(dy);
    require_close(y, ref_gelu(xd), 1e-5, 1e-6, "gelu out");
    cpu::gelu_backward(ctx, view(dx, {n}), view(dy, {n}), view(x, {n}));
    require_close(dx, finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_gelu(v)); }, xd),
                  1e-4, 1e-5, "gelu dinp");
    // In place, as the header allows.
    std::vector<float> xin = x, dyin = dy;
    cpu::gelu_forward(ctx, view(xin, {n}), view(xin, {n}));
    CHECK(xin == y);
    cpu::gelu_backward(ctx, view(dyin, {n}), view(dyin, {n}), view(x, {n}));
    CHECK(dyin == dx);
  }
}

TEST_CASE("swiglu matches the double reference and finite differences", "[cpu][swiglu]") {
  Context ctx;
  const int64_t N = 5, F = 13;
  auto g = random_floats(N * F, 51, -8.0f, 8.0f), u = random_floats(N * F, 52), dy = random_floats(N * F, 53);
  std::vector<float> y(N * F), dg(N * F, 4.0f), du(N * F, 4.0f);
  cpu::swiglu_forward(ctx, view(y, {N, F}), view(g, {N, F}), view(u, {N, F}));
  const auto gd = to_double(g), ud = to_double(u), dyd = to_double(dy);
  require_close(y, ref_swiglu(gd, ud), 1e-5, 1e-6, "swiglu out");
  cpu::swiglu_backward(ctx, view(dg, {N, F}), view(du, {N, F}), view(dy, {N, F}), view(g, {N, F}),
                       view(u, {N, F}));
  require_close(dg, finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_swiglu(v, ud)); }, gd),
                1e-4, 1e-5, "swiglu dgate");
  require_close(du, finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref_swiglu(gd, v)); }, ud),
                1e-4, 1e-5, "swiglu dup");
}

TEST_CASE("sigmoid gate matches the double reference and finite differences", "[cpu][moe]") {
  Context ctx;
  const int64_t N = 6, C = 11;
  auto y = random_floats(N * C, 61), g = random_floats(N, 62, -7.0f, 7.0f),
       dout = random_floats(N * C, 63);
  g[0] = -30.0f;  // saturated: the branch closed
  auto ref = [&](const std::vector<double>& yv, const std::vector<double>& gv) {
    std::vector<double> o(yv.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) o[n * C + c] = yv[n * C + c] / (1.0 + std::exp(-gv[n]));
    return o;
  };
  std::vector<float> out(N * C), dy(N * C, 5.0f), dg(N, 5.0f);
  cpu::sigmoid_gate_forward(ctx, view(out, {N, C}), view(y, {N, C}), view(g, {N, 1}));
  const auto yd = to_double(y), gd = to_double(g), dd = to_double(dout);
  require_close(out, ref(yd, gd), 1e-6, 1e-6, "sigmoid gate out");
  cpu::sigmoid_gate_backward(ctx, view(dy, {N, C}), view(dg, {N, 1}), view(dout, {N, C}),
                             view(y, {N, C}), view(g, {N, 1}));
  require_close(dy, finite_diff([&](const std::vector<double>& v) { return dot(dd, ref(v, gd)); }, yd),
                1e-5, 1e-6, "sigmoid gate dy");
  require_close(dg, finite_diff([&](const std::vector<double>& v) { return dot(dd, ref(yd, v)); }, gd),
                1e-5, 1e-6, "sigmoid gate dgate");
  std::vector<float> short_gate(N - 1);
  CHECK_THROWS_AS(cpu::sigmoid_gate_forward(ctx, view(out, {N, C}), view(y, {N, C}),
                                            view(short_gate, {N - 1, 1})),
                  Error);
}

TEST_CASE("rope rotates pairs (i, i + D/2) and backward is its transpose", "[cpu][rope]") {
  Context ctx;
  const int64_t B = 2, T = 5, H = 3, D = 8;
  const float theta = 10000.0f;
  auto x = random_floats(B * T * H * D, 61), dy = random_floats(B * T * H * D, 62);
  const auto xd = to_double(x), dyd = to_double(dy);
  for (int64_t pos_offset : {0, 7, 1000}) {
    INFO("pos_offset " << pos_offset);
    std::vector<float> y(x.size()), dx(x.size());
    cpu::rope_forward(ctx, view(y, {B, T, H, D}), view(x, {B, T, H, D}), theta, pos_offset);
    require_close(y, ref_rope(xd, B, T, H, D, theta, pos_offset), 1e-5, 1e-6, "rope out");
    cpu::rope_backward(ctx, view(dx, {B, T, H, D}), view(dy, {B, T, H, D}), theta, pos_offset);
    require_close(dx, finite_diff([&](const std::vector<double>& v) {
                    return dot(dyd, ref_rope(v, B, T, H, D, theta, pos_offset));
                  }, xd), 1e-4, 1e-5, "rope dinp");
    std::vector<float> inplace = x;  // out may alias inp
    cpu::rope_forward(ctx, view(inplace, {B, T, H, D}), view(inplace, {B, T, H, D}), theta, pos_offset);
    CHECK(inplace == y);
  }
  // A sequence continued at pos_offset equals the tail of the whole sequence.
  std::vector<float> whole(x.size()), tail(B * 2 * H * D), tail_in(B * 2 * H * D);
  cpu::rope_forward(ctx, view(whole, {B, T, H, D}), view(x, {B, T, H, D}), theta, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < 2 * H * D; ++j) tail_in[b * 2 * H * D + j] = x[(b * T + 3) * H * D + j];
  cpu::rope_forward(ctx, view(tail, {B, 2, H, D}), view(tail_in, {B, 2, H, D}), theta, 3);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < 2 * H * D; ++j)
      CHECK(tail[b * 2 * H * D + j] == Approx(whole[(b * T + 3) * H * D + j]).margin(1e-6));
}

TEST_CASE("rope at per-token positions (documents restarting at 0) matches the reference",
          "[cpu][rope][docmask]") {
  Context ctx;
  const int64_t B = 2, T = 6, H = 2, D = 8;
  const float theta = 500000.0f;
  auto x = random_floats(B * T * H * D, 71), dy = random_floats(B * T * H * D, 72);
  const auto xd = to_double(x), dyd = to_double(dy);
  std::vector<int32_t> pos = {0, 1, 2, 0, 1, 0, 7, 8, 9, 10, 0, 1};
  const Tensor positions(pos.data(), {B, T}, DType::i32);
  // Token (b, t) alone at pos_offset = its position.
  auto ref = [&](const std::vector<double>& v) {
    std::vector<double> out;
    for (int64_t n = 0; n < B * T; ++n) {
      std::vector<double> one(v.begin() + n * H * D, v.begin() + (n + 1) * H * D);
      auto r = ref_rope(one, 1, 1, H, D, theta, pos[n]);
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  };
  std::vector<float> y(x.size()), dx(x.size());
  cpu::rope_forward(ctx, view(y, {B, T, H, D}), view(x, {B, T, H, D}), theta, 0, positions);
  require_close(y, ref(xd), 1e-5, 1e-6, "rope out");
  cpu::rope_backward(ctx, view(dx, {B, T, H, D}), view(dy, {B, T, H, D}), theta, 0, positions);
  require_close(dx, finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref(v)); }, xd),
                1e-4, 1e-5, "rope dinp");
  // Positions 0..T-1 in every sequence are the plain rotation, bit for bit.
  std::vector<int32_t> plain(B * T);
  for (int64_t n = 0; n < B * T; ++n) plain[n] = static_cast<int32_t>(n % T);
  std::vector<float> a(x.size()), b(x.size());
  cpu::rope_forward(ctx, view(a, {B, T, H, D}), view(x, {B, T, H, D}), theta, 0);
  cpu::rope_forward(ctx, view(b, {B, T, H, D}), view(x, {B, T, H, D}), theta, 0,
                    Tensor(plain.data(), {B, T}, DType::i32));
  CHECK(a == b);
  CHECK_THROWS_AS(cpu::rope_forward(ctx, view(b, {B, T, H, D}), view(x, {B, T, H, D}), theta, 3,
                                    positions), Error);
}

TEST_CASE("rope with Llama 3.1 scaling: transformers' three bands, backward its transpose",
          "[cpu][rope]") {
  Context ctx;
  // D 16, theta 5e5: wavelengths 6.3 .. 2.6e5; with original 512 / (1, 4) the
  // bands are < 128 kept, 128..512 blended, > 512 divided by the factor.
  const int64_t B = 1, T = 6, H = 2, D = 16;
  const float theta = 500000.0f;
  const RopeScaling s{.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 512};
  const std::vector<double> f = llama3_freqs(theta, D, s);
  int kept = 0, blended = 0, divided = 0;
  for (int64_t i = 0; i < D / 2; ++i) {
    const double inv = std::pow(double(theta), -2.0 * i / D);
    kept += f[i] == inv;
    divided += f[i] == inv / 8;
    blended += f[i] != inv && f[i] != inv / 8;
  }
  REQUIRE((kept > 0 && blended > 0 && divided > 0));
  auto x = random_floats(B * T * H * D, 63), dy = random_floats(B * T * H * D, 64);
  const auto xd = to_double(x), dyd = to_double(dy);
  for (int64_t pos_offset : {0, 4000}) {
    INFO("pos_offset " << pos_offset);
    std::vector<float> y(x.size()), dx(x.size()), plain(x.size());
    cpu::rope_forward(ctx, view(y, {B, T, H, D}), view(x, {B, T, H, D}), Rope(theta, s), pos_offset);
    require_close(y, ref_rope(xd, B, T, H, D, theta, pos_offset, &s), 1e-5, 1e-6, "rope llama3 out");
    cpu::rope_forward(ctx, view(plain, {B, T, H, D}), view(x, {B, T, H, D}), theta, pos_offset);
    if (pos_offset > 0) CHECK(plain != y);  // the scaling shows
    cpu::rope_backward(ctx, view(dx, {B, T, H, D}), view(dy, {B, T, H, D}), Rope(theta, s), pos_offset);
    require_close(dx, finite_diff([&](const std::vector<double>& v) {
                    return dot(dyd, ref_rope(v, B, T, H, D, theta, pos_offset, &s));
                  }, xd), 1e-4, 1e-5, "rope llama3 dinp");
  }
}

TEST_CASE("rope with YaRN and linear scaling: transformers' frequencies and attention factor, "
          "backward its transpose", "[cpu][rope]") {
  Context ctx;
  // D 32, theta 1e4, original 4096: the ramp runs from pair 5 to pair 12 of
  // 16, so pairs are kept, blended and divided.
  const int64_t B = 1, T = 5, H = 2, D = 32;
  const float theta = 10000.0f;
  const auto [yarn_f, yarn_m] = yarn_freqs(theta, D, 4.0, 4096.0, 32.0, 1.0);
  const RopeScaling yarn = yarn_scaling(4.0, 4096.0, 32.0, 1.0, 0.0, D, theta);
  CHECK(yarn.ramp_low == 5.0);
  CHECK(yarn.ramp_high == 12.0);
  CHECK(yarn.attention_factor == Approx(1.1386294361));
  CHECK(mla_softmax_multiplier(yarn) == 1.0);
  // DeepSeek's mscale pair: the attention factor m(1) / m(0.5) with m(x) = 0.1 x ln 4 + 1, and
  // MLA's softmax multiplier m(0.5)^2; V2-Lite's equal pair (factor 40) leaves the factor at 1.
  const RopeScaling pair = yarn_scaling(4.0, 4096.0, 32.0, 1.0, 0.0, D, theta, 1.0, 0.5);
  CHECK(pair.attention_factor == Approx(1.0648216254));
  CHECK(mla_softmax_multiplier(pair) == Approx(1.1434339663));
  CHECK(yarn_scaling(4.0, 4096.0, 32.0, 1.0, 1.5, D, theta, 1.0, 0.5).attention_factor == 1.5);
  const RopeScaling lite = yarn_scaling(40.0, 4096.0, 32.0, 1.0, 0.0, D, theta, 0.707, 0.707);
  CHECK(lite.attention_factor == 1.0);
  CHECK(mla_softmax_multiplier(lite) == Approx(1.5896261651));
  RopeScaling linear{.factor = 4, .kind = RopeKind::linear};
  std::vector<double> linear_f(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) linear_f[static_cast<size_t>(i)] = std::pow(double(theta), -2.0 * i / D) / 4;
  auto x = random_floats(B * T * H * D, 65), dy = random_floats(B * T * H * D, 66);
  const auto xd = to_double(x), dyd = to_double(dy);
  for (const auto& [name, s, f, m] : {std::tuple{"yarn", yarn, yarn_f, yarn_m}, std::tuple{"linear", linear, linear_f, 1.0}})
    for (int64_t pos_offset : {0, 5000}) {
      INFO(name << " pos_offset " << pos_offset);
      std::vector<float> y(x.size()), dx(x.size());
      cpu::rope_forward(ctx, view(y, {B, T, H, D}), view(x, {B, T, H, D}), Rope(theta, s), pos_offset);
      require_close(y, ref_rope(xd, B, T, H, D, theta, pos_offset, nullptr, &f, m), 1e-5, 1e-6, "rope out");
      cpu::rope_backward(ctx, view(dx, {B, T, H, D}), view(dy, {B, T, H, D}), Rope(theta, s), pos_offset);
      require_close(dx, finite_diff([&](const std::vector<double>& v) {
                      return dot(dyd, ref_rope(v, B, T, H, D, theta, pos_offset, nullptr, &f, m));
                    }, xd), 1e-4, 1e-5, "rope dinp");
    }
}

TEST_CASE("elementwise add, accumulate, scale, fill, copy", "[cpu][elementwise]") {
  Context ctx;
  const int64_t n = 1001;
  auto a = random_floats(n, 71), b = random_floats(n, 72);
  std::vector<float> out(n), acc = a;
  cpu::add(ctx, view(out, {n}), view(a, {n}), view(b, {n}));
  cpu::accumulate(ctx, view(acc, {n}), view(b, {n}));
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(out[i] == a[i] + b[i]);
    REQUIRE(acc[i] == a[i] + b[i]);
  }
  cpu::add(ctx, view(a, {n}), view(a, {n}), view(b, {n}));  // out aliases a
  CHECK(a == out);
  cpu::scale(ctx, view(out, {7, 143}), 0.5f);
  for (int64_t i = 0; i < n; ++i) REQUIRE(out[i] == 0.5f * a[i]);
  cpu::fill(ctx, view(out, {n}), 3.25f);
  for (float v : out) REQUIRE(v == 3.25f);
  std::vector<int32_t> ints(5, 9);
  cpu::fill(ctx, view(ints, {5}), 0.0f);  // zero fills any dtype
  CHECK(ints == std::vector<int32_t>(5, 0));
  CHECK_THROWS_AS(cpu::fill(ctx, view(ints, {5}), 1.0f), Error);
  std::vector<float> dst(n);
  cpu::copy(ctx, view(dst, {n}), view(b, {n}));
  CHECK(dst == b);
  std::vector<double> wrong(n);
  CHECK_THROWS_AS(cpu::copy(ctx, view(wrong, {n}), view(b, {n})), Error);
  CHECK_THROWS_AS(cpu::add(ctx, view(out, {n}), view(a, {n}), view(ints, {5})), Error);
}
