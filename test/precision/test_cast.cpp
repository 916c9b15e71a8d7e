// The cast, amax and found_nonfinite ops on CPU tensors: every dtype pair, scaling,
// strided (transposed) views, the threaded path, and their error checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "test/precision/cpu_ops.h"
#include "test/precision/reference_formats.h"

using namespace precision_test;
using trainer::DType;
using trainer::Tensor;

namespace {

const DType kFloatDtypes[] = {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2};

const Format* format_of(DType d) {
  switch (d) {
    case DType::bf16: return &kBF16;
    case DType::f16: return &kF16;
    case DType::e4m3: return &kE4M3;
    case DType::e5m2: return &kE5M2;
    default: return nullptr;  // f32
  }
}

// Building an encoder sorts its format's table: once per format.
const Encoder& encoder(const Format* f) {
  static const Encoder bf16(kBF16), f16(kF16), e4m3(kE4M3), e5m2(kE5M2);
  if (f == &kBF16) return bf16;
  if (f == &kF16) return f16;
  if (f == &kE4M3) return e4m3;
  return e5m2;
}

// A buffer of n elements of dtype d, read and written as codes / values through the reference.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> bytes;
  Buffer(DType d, int64_t n) : dtype(d), bytes(static_cast<size_t>(n) * trainer::dtype_size(d)) {}
  Tensor tensor(std::initializer_list<int64_t> shape) { return Tensor(bytes.data(), shape, dtype); }
  uint32_t code(int64_t i) const {
    uint32_t c = 0;
    std::memcpy(&c, bytes.data() + i * trainer::dtype_size(dtype), trainer::dtype_size(dtype));
    return c;
  }
  void set_code(int64_t i, uint32_t c) {
    std::memcpy(bytes.data() + i * trainer::dtype_size(dtype), &c, trainer::dtype_size(dtype));
  }
  double value(int64_t i) const {
    const Format* f = format_of(dtype);
    if (!f) {
      float x;
      std::memcpy(&x, bytes.data() + i * 4, 4);
      return x;
    }
    return decode_ref(*f, code(i));
  }
  // Stores x rounded by the reference (fp32 stored as is).
  void set_value(int64_t i, float x) {
    const Format* f = format_of(dtype);
    if (!f)
      std::memcpy(bytes.data() + i * 4, &x, 4);
    else
      set_code(i, encoder(f).encode(x));
  }
};

// What dst element i must hold after cast(dst, src, scale): the reference encoding of
// the fp32 product of the decoded source and the scale.
uint32_t expected_code(DType dst, double src_value, float scale) {
  const float x = static_cast<float>(src_value) * scale;
  if (const Format* f = format_of(dst)) return encoder(f).encode(x);
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

std::vector<float> test_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exps(-20, 18);
  std::vector<float> v(n);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 448.0f, 464.0f, -1e6f, 57344.0f, 65504.0f, 1e-8f};
  for (int64_t i = 0; i < n; ++i)
    v[i] = i < 11 ? specials[i] : std::ldexp(normal(rng), exps(rng));
  return v;
}

int count_mismatches(const Buffer& dst, const Buffer& src, float scale, int64_t n) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t want = expected_code(dst.dtype, src.value(i), scale);
    const uint32_t got = dst.code(i);
    // A NaN result is any NaN when dst is fp32 (the product may carry a payload).
    const bool both_nan_f32 = dst.dtype == DType::f32 && std::isnan(dst.value(i)) &&
                              std::isnan(static_cast<float>(src.value(i)) * scale);
    if (got != want && !both_nan_f32 && ++bad <= 3)
      UNSCOPED_INFO(trainer::dtype_name(src.dtype) << " -> " << trainer::dtype_name(dst.dtype) << " [" << i
                                                   << "] src " << src.value(i) << " got 0x" << std::hex
                                                   << got << " want 0x" << want);
  }
  return bad;
}

}  // namespace

TEST_CASE("cast: every dtype pair, with and without a scale", "[cpu][precision]") {
  trainer::Context ctx;
  const int64_t n = 300;
  const std::vector<float> values = test_values(n, 7);
  for (DType sd : kFloatDtypes) {
    Buffer src(sd, n);
    for (int64_t i = 0; i < n; ++i) src.set_value(i, values[i]);
    for (DType dd : kFloatDtypes) {
      for (float scale : {1.0f, 0.0625f, 3.7f}) {
        Buffer dst(dd, n);
        std::vector<float> s{scale};
        Tensor scale_t = scale == 1.0f ? Tensor{} : Tensor(s.data(), {1});
        precision_test::cast(ctx, dst.tensor({3, 100}), src.tensor({3, 100}), scale_t);
        INFO(trainer::dtype_name(sd) << " -> " << trainer::dtype_name(dd) << " scale " << scale);
        CHECK(count_mismatches(dst, src, scale, n) == 0);
      }
    }
  }
}

TEST_CASE("cast: quantise with a scale, dequantise with its inverse", "[cpu][precision]") {
  trainer::Context ctx;
  // x spans [-2, 2]; with scale 448 / 2 the extremes land on the E4M3 maximum.
  const int64_t n = 1000;
  std::vector<float> x(n), back(n), scale{224.0f}, scale_inv{1.0f / 224.0f};
  for (int64_t i = 0; i < n; ++i) x[i] = -2.0f + 4.0f * static_cast<float>(i) / (n - 1);
  std::vector<uint8_t> q(n);
  precision_test::cast(ctx, Tensor(q.data(), {n}, DType::e4m3), Tensor(x.data(), {n}), Tensor(scale.data(), {1}));
  precision_test::cast(ctx, Tensor(back.data(), {n}), Tensor(q.data(), {n}, DType::e4m3),
                Tensor(scale_inv.data(), {1}));
  CHECK(q[0] == 0xFE);      // -448
  CHECK(q[n - 1] == 0x7E);  // +448
  for (int64_t i = 0; i < n; ++i) {
    // E4M3 keeps 3 mantissa bits: relative error <= 2^-4 for normals; the smallest
    // values sit in the subnormal range (below 2^-6 / 224), absolute error <= 2^-10 / 224.
    const double err = std::fabs(back[i] - x[i]);
    REQUIRE(err <= std::max(std::fabs(x[i]) / 16.0, std::ldexp(1.0, -10) / 224.0));
  }
}

TEST_CASE("cast: a transposed (strided) source gives a cast-transpose", "[cpu][precision]") {
  trainer::Context ctx;
  const int64_t rows = 7, cols = 13;
  const std::vector<float> values = test_values(rows * cols, 11);
  std::vector<float> src(values);
  Tensor src_t(src.data(), {cols, rows});  // viewed transposed: element (j, i) at i*cols + j
  src_t.stride = {1, cols, 0, 0};
  for (DType dd : {DType::bf16, DType::e5m2, DType::f32}) {
    for (float scale : {1.0f, 3.7f}) {
      Buffer dst(dd, rows * cols);
      std::vector<float> s{scale};
      precision_test::cast(ctx, dst.tensor({cols, rows}), src_t, scale == 1.0f ? Tensor{} : Tensor(s.data(), {1}));
      int bad = 0;
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t i = 0; i < rows; ++i) {
          const float x = src[i * cols + j];
          const uint32_t got = dst.code(j * rows + i);
          const uint32_t want = expected_code(dd, x, scale);
          if (got != want && !(std::isnan(x) && dd == DType::f32)) ++bad;
        }
      INFO(trainer::dtype_name(dd) << " scale " << scale);
      CHECK(bad == 0);
    }
  }
  // Strided views of different shapes are refused.
  std::vector<float> out(rows * cols);
  CHECK_THROWS_AS(precision_test::cast(ctx, Tensor(out.data(), {rows, cols}), src_t), trainer::Error);
}

TEST_CASE("cast: large tensors take the threaded path with the same result", "[cpu][precision]") {
  trainer::Context ctx;
  const int64_t n = (1 << 17) + 3;
  const std::vector<float> values = test_values(n, 13);
  Buffer src(DType::f32, n);
  for (int64_t i = 0; i < n; ++i) src.set_value(i, values[i]);
  for (DType dd : {DType::bf16, DType::f16, DType::e4m3}) {
    Buffer dst(dd, n);
    std::vector<float> s{0.5f};
    precision_test::cast(ctx, dst.tensor({n}), src.tensor({n}), Tensor(s.data(), {1}));
    CHECK(count_mismatches(dst, src, 0.5f, n) == 0);
  }
}

TEST_CASE("cast: argument checks", "[cpu][precision]") {
  trainer::Context ctx;
  std::vector<float> a(8), b(4), s2(2);
  std::vector<int32_t> ints(8);
  CHECK_THROWS_AS(precision_test::cast(ctx, Tensor(a.data(), {8}), Tensor(b.data(), {4})), trainer::Error);
  CHECK_THROWS_AS(precision_test::cast(ctx, Tensor(a.data(), {8}), Tensor(ints.data(), {8}, DType::i32)),
                  trainer::Error);
  CHECK_THROWS_AS(precision_test::cast(ctx, Tensor(a.data(), {8}), Tensor(a.data(), {8}), Tensor(s2.data(), {2})),
                  trainer::Error);
  CHECK_THROWS_AS(precision_test::cast(ctx, Tensor(a.data(), {8}), Tensor(a.data(), {8}),
                                Tensor(ints.data(), {1}, DType::i32)),
                  trainer::Error);
}

TEST_CASE("amax: max |x|, accumulated, NaN ignored, inf kept", "[cpu][precision]") {
  trainer::Context ctx;
  std::vector<float> out{0.0f};
  Tensor out_t(out.data(), {1});
  std::vector<float> x{1.0f, -7.5f, 3.0f, NAN, -0.0f};
  precision_test::amax(ctx, out_t, Tensor(x.data(), {5}));
  CHECK(out[0] == 7.5f);
  std::vector<float> smaller{2.0f, -1.0f};
  precision_test::amax(ctx, out_t, Tensor(smaller.data(), {2}));
  CHECK(out[0] == 7.5f);  // accumulated: max with what was there
  std::vector<float> all_nan{NAN, NAN};
  out[0] = 0.0f;
  precision_test::amax(ctx, out_t, Tensor(all_nan.data(), {2}));
  CHECK(out[0] == 0.0f);
  std::vector<float> with_inf{1.0f, -INFINITY, NAN};
  precision_test::amax(ctx, out_t, Tensor(with_inf.data(), {3}));
  CHECK(out[0] == INFINITY);

  // Narrow dtypes: e4m3 0xFE = -448, 0x7F = NaN; e5m2 0x7C = inf.
  std::vector<uint8_t> e4{0x01, 0xFE, 0x7F, 0x38};
  out[0] = 0.0f;
  precision_test::amax(ctx, out_t, Tensor(e4.data(), {4}, DType::e4m3));
  CHECK(out[0] == 448.0f);
  std::vector<uint16_t> bf{0xC2F6, 0x3F80};  // -123, 1
  out[0] = 0.0f;
  precision_test::amax(ctx, out_t, Tensor(bf.data(), {2}, DType::bf16));
  CHECK(out[0] == 123.0f);

  // Threaded and strided: the maximum sits in one column of a transposed view.
  const int64_t rows = 300, cols = 200;
  std::vector<float> big(rows * cols, 0.25f);
  big[123 * cols + 45] = -9.0f;
  Tensor bt(big.data(), {cols, rows});
  bt.stride = {1, cols, 0, 0};
  out[0] = 0.0f;
  precision_test::amax(ctx, out_t, bt);
  CHECK(out[0] == 9.0f);

  out[0] = -1.0f;
  CHECK_THROWS_AS(precision_test::amax(ctx, out_t, Tensor(x.data(), {5})), trainer::Error);
}

TEST_CASE("found_nonfinite: sets the flag on inf or NaN in any dtype", "[cpu][precision]") {
  trainer::Context ctx;
  std::vector<float> flag{0.0f};
  Tensor flag_t(flag.data(), {1});
  std::vector<float> clean{1.0f, -3e38f, 0.0f};
  precision_test::found_nonfinite(ctx, flag_t, Tensor(clean.data(), {3}));
  CHECK(flag[0] == 0.0f);
  struct Case {
    DType dtype;
    std::vector<unsigned char> bytes;
    bool nonfinite;
  };
  const uint16_t bf16_nan = 0xFFC1, f16_inf = 0x7C00, f16_max = 0x7BFF;
  std::vector<Case> cases = {
      {DType::e4m3, {0x7E, 0xFE}, false}, {DType::e4m3, {0x00, 0xFF}, true},
      {DType::e5m2, {0x7B, 0x00}, false}, {DType::e5m2, {0x00, 0xFC}, true},
      {DType::e5m2, {0x7D, 0x00}, true},
  };
  for (uint16_t h : {bf16_nan}) cases.push_back({DType::bf16, {uint8_t(h & 0xFF), uint8_t(h >> 8)}, true});
  cases.push_back({DType::f16, {uint8_t(f16_inf & 0xFF), uint8_t(f16_inf >> 8)}, true});
  cases.push_back({DType::f16, {uint8_t(f16_max & 0xFF), uint8_t(f16_max >> 8)}, false});
  for (auto& c : cases) {
    flag[0] = 0.0f;
    const int64_t n = static_cast<int64_t>(c.bytes.size() / trainer::dtype_size(c.dtype));
    precision_test::found_nonfinite(ctx, flag_t, Tensor(c.bytes.data(), {n}, c.dtype));
    INFO(trainer::dtype_name(c.dtype) << " case");
    CHECK((flag[0] == 1.0f) == c.nonfinite);
  }
  // Accumulated: a clean tensor does not clear a raised flag.
  flag[0] = 0.0f;
  std::vector<float> bad{1.0f, NAN};
  precision_test::found_nonfinite(ctx, flag_t, Tensor(bad.data(), {2}));
  precision_test::found_nonfinite(ctx, flag_t, Tensor(clean.data(), {3}));
  CHECK(flag[0] == 1.0f);
  // Threaded: one inf among many.
  std::vector<float> big(1 << 17, 1.0f);
  big[99999] = -INFINITY;
  flag[0] = 0.0f;
  precision_test::found_nonfinite(ctx, flag_t, Tensor(big.data(), {int64_t(big.size())}));
  CHECK(flag[0] == 1.0f);
}

#ifndef TRAINER_CUDA
// The dispatching trainer::cast (with its default scale) reaches the CPU backend; in
// CUDA builds the [cuda] suite compares the two backends instead.
TEST_CASE("cast: the dispatching op calls the CPU backend", "[cpu][precision]") {
  trainer::Context ctx;
  std::vector<float> x{1.0f, -2.5f, 1e-3f}, s{4.0f};
  std::vector<uint16_t> h(3);
  trainer::cast(ctx, Tensor(h.data(), {3}, DType::f16), Tensor(x.data(), {3}));
  CHECK(h == std::vector<uint16_t>{0x3C00, 0xC100, 0x1419});  // 1e-3 = 1.024 * 2^-10
  trainer::cast(ctx, Tensor(h.data(), {3}, DType::f16), Tensor(x.data(), {3}), Tensor(s.data(), {1}));
  CHECK(h[0] == 0x4400);  // 4.0
  std::vector<float> m{0.0f}, flag{0.0f};
  trainer::amax(ctx, Tensor(m.data(), {1}), Tensor(x.data(), {3}));
  CHECK(m[0] == 2.5f);
  trainer::found_nonfinite(ctx, Tensor(flag.data(), {1}), Tensor(x.data(), {3}));
  CHECK(flag[0] == 0.0f);
}
#endif
