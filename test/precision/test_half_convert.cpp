// The F16C fast paths of the fp16 staging conversions against the portable
// reference conversions of kernels/numeric.h, bit for bit: every fp16 code,
// and fp32 inputs around every fp16 rounding boundary plus random bit patterns.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/cpu/half_convert.h"
#include "kernels/numeric.h"

using namespace trainer;

namespace {
uint32_t bits(float x) { return f32_bits(x); }
float from_bits(uint32_t u) { return f32_from_bits(u); }
}  // namespace

TEST_CASE("fp16 -> fp32 bulk conversion: every code", "[cpu][precision]") {
  std::vector<uint16_t> codes(65536 + 5);  // + a ragged tail
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint16_t>(i);
  std::vector<float> got(codes.size());
  cpu::f16_to_f32_n(codes.data(), got.data(), int64_t(codes.size()));
  for (size_t i = 0; i < codes.size(); ++i) {
    INFO("code " << codes[i]);
    REQUIRE(bits(got[i]) == bits(f16_to_f32(codes[i])));
  }
}

TEST_CASE("fp32 -> fp16 bulk conversion: boundaries, specials, random bits", "[cpu][precision]") {
  std::vector<float> x;
  // Each fp16 value, the midpoints to its neighbours (ties) and one ulp either side.
  for (uint32_t c = 0; c < 0x7C00; ++c) {
    float lo = f16_to_f32(static_cast<uint16_t>(c)), hi = f16_to_f32(static_cast<uint16_t>(c + 1));
    float mid = lo + (hi - lo) / 2;
    for (float v : {lo, mid, from_bits(bits(mid) + 1), from_bits(bits(mid) - 1)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  for (float v : {65504.0f, 65519.99f, 65520.0f, 1e30f, INFINITY, -INFINITY, NAN, -NAN, 0.0f, -0.0f,
                  1e-10f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f})
    x.push_back(v);
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) x.push_back(from_bits(static_cast<uint32_t>(rng())));
  x.push_back(1.0f);  // ragged tail
  std::vector<uint16_t> got(x.size());
  cpu::f32_to_f16_n(x.data(), got.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("input bits " << bits(x[i]));
    REQUIRE(got[i] == f32_to_f16(x[i]));
  }
}

TEST_CASE("bf16 bulk conversions and the dtype dispatch: every code, random fp32 bits",
          "[cpu][precision]") {
  std::vector<uint16_t> codes(65536 + 3);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint16_t>(i);
  std::vector<float> got(codes.size());
  cpu::to_f32(DType::bf16, codes.data(), got.data(), int64_t(codes.size()));
  for (size_t i = 0; i < codes.size(); ++i) REQUIRE(bits(got[i]) == bits(bf16_to_f32(codes[i])));
  std::vector<float> x;
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) x.push_back(from_bits(static_cast<uint32_t>(rng())));
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3.3895314e38f, 1.0039062f, 1.0078125f})
    x.push_back(v);
  for (DType d : {DType::bf16, DType::f16}) {
    std::vector<uint16_t> out(x.size());
    cpu::from_f32(d, x.data(), out.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      INFO(dtype_name(d) << " input bits " << bits(x[i]));
      REQUIRE(out[i] == (d == DType::bf16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i])));
    }
  }
}
