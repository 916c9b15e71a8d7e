// kernels/numeric.h against the independent reference of reference_formats.h: every
// code decoded; encoding at every code, at every tie and beside it, at the subnormal
// and overflow boundaries, for NaN, +-0 and +-inf, and on random fp32 inputs.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/numeric.h"
#include "test/precision/reference_formats.h"

using namespace precision_test;

namespace {

struct Impl {
  const Format* format;
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
};

const Impl kImpls[] = {
    {&kBF16, [](float x) -> uint32_t { return trainer::f32_to_bf16(x); },
     [](uint32_t c) { return trainer::bf16_to_f32(static_cast<uint16_t>(c)); }},
    {&kF16, [](float x) -> uint32_t { return trainer::f32_to_f16(x); },
     [](uint32_t c) { return trainer::f16_to_f32(static_cast<uint16_t>(c)); }},
    {&kE4M3, [](float x) -> uint32_t { return trainer::f32_to_e4m3(x); },
     [](uint32_t c) { return trainer::e4m3_to_f32(static_cast<uint8_t>(c)); }},
    {&kE5M2, [](float x) -> uint32_t { return trainer::f32_to_e5m2(x); },
     [](uint32_t c) { return trainer::e5m2_to_f32(static_cast<uint8_t>(c)); }},
};

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// A double that must be an fp32 exactly (the test points are built in double).
float exact_float(double v) {
  const float f = static_cast<float>(v);
  REQUIRE(static_cast<double>(f) == v);
  return f;
}

// Counts mismatches rather than REQUIRE per point, reporting the first few.
struct Mismatches {
  const char* what;
  int count = 0;
  void check(const Impl& impl, float x, uint32_t expected) {
    const uint32_t got = impl.encode(x);
    if (got == expected) return;
    if (++count <= 5)
      UNSCOPED_INFO(impl.format->name << " " << what << ": encode(" << x << " = 0x" << std::hex
                                      << bits(x) << ") = 0x" << got << ", expected 0x" << expected);
  }
};

}  // namespace

TEST_CASE("every code decodes to its reference value", "[cpu][precision]") {
  for (const Impl& impl : kImpls) {
    const Format& f = *impl.format;
    INFO(f.name);
    int bad = 0, nans = 0;
    for (uint32_t c = 0; c < f.num_codes(); ++c) {
      const double ref = decode_ref(f, c);
      const float got = impl.decode(c);
      bool ok;
      if (std::isnan(ref)) {
        ++nans;
        ok = std::isnan(got) && std::signbit(got) == std::signbit(ref);
      } else {
        // The value is exact in fp32; comparing bits also checks the sign of zero.
        ok = bits(got) == bits(static_cast<float>(ref)) && static_cast<double>(got) == ref;
      }
      if (!ok && ++bad <= 5) UNSCOPED_INFO("code 0x" << std::hex << c << " decoded to " << got << ", expected " << ref);
    }
    CHECK(bad == 0);
    // The NaN encodings each format has: bf16/fp16 2*(2^m - 1), E5M2 6, E4M3 2.
    const int expected_nans = f.ieee_specials ? 2 * ((1 << f.man_bits) - 1) : 2;
    CHECK(nans == expected_nans);
  }
}

TEST_CASE("encode(decode(c)) == c for every non-NaN code", "[cpu][precision]") {
  for (const Impl& impl : kImpls) {
    const Format& f = *impl.format;
    Mismatches m{"round trip"};
    for (uint32_t c = 0; c < f.num_codes(); ++c) {
      const Kind k = kind_of(f, c);
      if (k == Kind::nan) continue;
      // SATFINITE has no infinities to produce: fp8 +-inf goes to +-max (next test).
      if (k == Kind::inf && f.saturate) continue;
      m.check(impl, static_cast<float>(decode_ref(f, c)), c);
    }
    INFO(f.name);
    CHECK(m.count == 0);
  }
}

TEST_CASE("ties round to the even code, neighbours to the nearest", "[cpu][precision]") {
  for (const Impl& impl : kImpls) {
    const Format& f = *impl.format;
    const Encoder ref(f);
    const auto& table = ref.table();
    Mismatches ties{"tie"}, below{"below tie"}, above{"above tie"}, against_ref{"reference"};
    for (size_t i = 0; i + 1 < table.size(); ++i) {
      const auto [lo, lo_code] = table[i];
      const auto [hi, hi_code] = table[i + 1];
      REQUIRE(hi_code == lo_code + 1);  // adjacent values have adjacent codes, one even
      const float mid = exact_float((lo + hi) / 2);
      const uint32_t even = (lo_code & 1) == 0 ? lo_code : hi_code;
      const float just_below = std::nextafter(mid, 0.0f), just_above = std::nextafter(mid, INFINITY);
      for (uint32_t sign : {0u, f.sign_bit()}) {
        const float s = sign ? -1.0f : 1.0f;
        ties.check(impl, s * mid, sign | even);
        below.check(impl, s * just_below, sign | lo_code);
        above.check(impl, s * just_above, sign | hi_code);
        for (float x : {mid, just_below, just_above}) against_ref.check(impl, s * x, ref.encode(s * x));
      }
    }
    INFO(f.name);
    CHECK(ties.count == 0);
    CHECK(below.count == 0);
    CHECK(above.count == 0);
    CHECK(against_ref.count == 0);
  }
}

TEST_CASE("zeros, subnormal boundaries, overflow, infinities and NaN", "[cpu][precision]") {
  for (const Impl& impl : kImpls) {
    const Format& f = *impl.format;
    const Encoder ref(f);
    INFO(f.name);
    const uint32_t neg = f.sign_bit();
    const double min_sub = std::ldexp(1.0, 1 - f.bias - f.man_bits);
    const double min_normal = std::ldexp(1.0, 1 - f.bias);
    const uint32_t min_normal_code = 1u << f.man_bits;
    const uint32_t max_sub_code = min_normal_code - 1;

    CHECK(impl.encode(0.0f) == 0);
    CHECK(impl.encode(-0.0f) == neg);
    // Half the smallest subnormal is a tie between 0 (even) and code 1; above it, 1.
    const float half_min = exact_float(min_sub / 2);
    CHECK(impl.encode(half_min) == 0);
    CHECK(impl.encode(-half_min) == neg);
    CHECK(impl.encode(std::nextafter(half_min, 1.0f)) == 1);
    CHECK(impl.encode(-std::nextafter(half_min, 1.0f)) == (neg | 1));
    CHECK(impl.encode(exact_float(min_sub)) == 1);
    CHECK(impl.encode(FLT_TRUE_MIN) == 0);
    CHECK(impl.encode(-FLT_TRUE_MIN) == neg);
    // The largest subnormal rounds up into the smallest normal at the tie above it.
    const double max_sub = decode_ref(f, max_sub_code);
    CHECK(impl.encode(exact_float((max_sub + min_normal) / 2)) == min_normal_code);
    CHECK(impl.encode(exact_float(min_normal)) == min_normal_code);
    // fp32 subnormal inputs (only bf16 can represent some of them exactly).
    for (float x : {FLT_MIN / 2, FLT_MIN / 3, FLT_TRUE_MIN * 3, FLT_MIN})
      for (float s : {1.0f, -1.0f}) CHECK(impl.encode(s * x) == ref.encode(s * x));

    // Overflow: fp8 saturates to +-max (SATFINITE), bf16/fp16 go to +-inf.
    const uint32_t max_code = ref.max_code();
    const double max = ref.max();
    const double ulp = max - decode_ref(f, max_code - 1);
    const uint32_t inf_code = (((1u << f.exp_bits) - 1) << f.man_bits);
    const uint32_t overflow = f.saturate ? max_code : inf_code;
    CHECK(impl.encode(exact_float(max)) == max_code);
    CHECK(impl.encode(-exact_float(max)) == (neg | max_code));
    CHECK(impl.encode(std::nextafter(exact_float(max + ulp / 2), 0.0f)) == max_code);
    CHECK(impl.encode(exact_float(max + ulp / 2)) == ((max_code & 1) ? overflow : max_code));
    CHECK(impl.encode(std::nextafter(exact_float(max + ulp / 2), INFINITY)) == overflow);
    CHECK(impl.encode(FLT_MAX) == overflow);
    CHECK(impl.encode(-FLT_MAX) == (neg | overflow));
    CHECK(impl.encode(INFINITY) == overflow);
    CHECK(impl.encode(-INFINITY) == (neg | overflow));
    if (f.saturate) {
      // E5M2 has inf codes (0x7C/0xFC) but __NV_SATFINITE never produces them.
      CHECK(impl.encode(1e30f) == max_code);
      CHECK(impl.decode(impl.encode(INFINITY)) == static_cast<float>(max));
    }

    // Every NaN (quiet, signalling, negative, with payloads) becomes the canonical NaN.
    for (uint32_t nan_bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7FA5A5A5u}) {
      CHECK(impl.encode(from_bits(nan_bits)) == f.nan_code);
    }
    CHECK(std::isnan(impl.decode(f.nan_code)));
  }
  // The documented maxima.
  CHECK(trainer::e4m3_to_f32(0x7E) == trainer::kE4M3Max);
  CHECK(trainer::e5m2_to_f32(0x7B) == trainer::kE5M2Max);
  CHECK(trainer::f16_to_f32(0x7BFF) == trainer::kF16Max);
  CHECK(trainer::bf16_to_f32(0x7F7F) == trainer::kBF16Max);
}

TEST_CASE("random fp32 inputs encode as the reference", "[cpu][precision]") {
  std::mt19937_64 rng(20261129);
  for (const Impl& impl : kImpls) {
    const Format& f = *impl.format;
    const Encoder ref(f);
    Mismatches any_bits{"random bits"}, in_range{"random in range"};
    // Arbitrary bit patterns: mostly far outside the fp8/fp16 ranges.
    for (int i = 0; i < (1 << 18); ++i) {
      const float x = from_bits(static_cast<uint32_t>(rng()));
      any_bits.check(impl, x, ref.encode(x));
    }
    // Exponents spread over the format's range and a little beyond, any mantissa.
    std::uniform_int_distribution<int> exp_dist(-f.bias - f.man_bits - 3, f.bias + 3);
    for (int i = 0; i < (1 << 18); ++i) {
      const uint64_t r = rng();
      const float m = from_bits(0x3F800000u | static_cast<uint32_t>(r & 0x7FFFFF));  // [1, 2)
      const float x = std::ldexp(m, std::min(exp_dist(rng), 127)) * ((r >> 40) & 1 ? -1.0f : 1.0f);
      in_range.check(impl, x, ref.encode(x));
    }
    INFO(f.name);
    CHECK(any_bits.count == 0);
    CHECK(in_range.count == 0);
  }
}

TEST_CASE("round_to_* equals decode of encode", "[cpu][precision]") {
  for (float x : {0.1f, -3.14159f, 1e-6f, 500.0f, -70000.0f, 1e-30f}) {
    CHECK(trainer::round_to_bf16(x) == trainer::bf16_to_f32(trainer::f32_to_bf16(x)));
    CHECK(trainer::round_to_f16(x) == trainer::f16_to_f32(trainer::f32_to_f16(x)));
    CHECK(trainer::round_to_e4m3(x) == trainer::e4m3_to_f32(trainer::f32_to_e4m3(x)));
    CHECK(trainer::round_to_e5m2(x) == trainer::e5m2_to_f32(trainer::f32_to_e5m2(x)));
  }
  // A concrete value per format, worked by hand: 0.1 = 1.6 * 2^-4.
  CHECK(trainer::f32_to_e4m3(0.1f) == 0x1D);    // 2^-4 * 1.625 (101b): 1.6 is nearest 1.625
  CHECK(trainer::f32_to_e5m2(0.1f) == 0x2E);    // 2^-4 * 1.5 (10b): 1.6 is nearer 1.5 than 1.75
  CHECK(trainer::f32_to_f16(0.1f) == 0x2E66);   // the well-known fp16 encoding of 0.1
  CHECK(trainer::f32_to_bf16(0.1f) == 0x3DCD);  // 0x3DCCCCCD rounded up
}
