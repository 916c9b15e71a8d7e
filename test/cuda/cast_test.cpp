// [cuda][cast] dtype conversion, amax and the non-finite check against the CPU op:
// both use kernels/numeric.h, so every pair of the five float dtypes must agree bit
// for bit, scaled or not, contiguous or transposed, specials included.
#include <cmath>
#include <limits>

#include "kernels/cast.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

constexpr DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2};

// Values across every format's range, with zeros, subnormals, ties, inf and NaN.
std::vector<float> cast_inputs(int64_t n, uint64_t seed) {
  auto v = random_floats(n, seed, -1.0f, 1.0f);
  const float specials[] = {0.0f, -0.0f, 1e-45f, 1e-8f, 0.5f, 448.0f, 464.0f, 57344.0f, 70000.0f,
                            65504.0f, 1e30f, -3.4e38f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (int64_t i = 0; i < n; ++i) {
    if (i % 7 == 3) v[i] = specials[(i / 7) % std::size(specials)];
    else if (i % 5 == 1) v[i] *= std::ldexp(1.0f, static_cast<int>(i % 60) - 30);
  }
  return v;
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data);
  return std::vector<unsigned char>(p, p + t.nbytes());
}

}  // namespace

TEST_CASE("cast matches the CPU op bit for bit for every dtype pair", "[cuda][cast]") {
  const int64_t rows = 33, cols = 129, n = rows * cols;
  const auto x = cast_inputs(n, 700);
  HostTensor hx({rows, cols}, x);
  for (DType from : kFloatTypes) {
    // The source in dtype `from`, made by the CPU op from fp32.
    std::vector<unsigned char> src_bytes(n * dtype_size(from));
    Tensor hsrc(src_bytes.data(), {rows, cols}, from, Device::cpu);
    cpu::cast(cpu(), hsrc, hx, Tensor{});
    DeviceTensor gsrc({rows, cols}, from);
    gsrc.upload_bytes(src_bytes);
    for (DType to : kFloatTypes) {
      for (bool scaled : {false, true}) {
        for (bool transposed : {false, true}) {
          const std::string tag = fmt::format("cast {} -> {} scaled={} transposed={}",
                                              dtype_name(from), dtype_name(to), scaled, transposed);
          std::vector<float> scale_value = {0.37f};
          Tensor hscale(scale_value.data(), {1}, DType::f32, Device::cpu);
          DeviceTensor gscale({1});
          gscale.upload(scale_value);
          // Transposed: dst (cols, rows) viewed as (rows, cols) with swapped strides.
          std::vector<unsigned char> ref_bytes(n * dtype_size(to), 0);
          Tensor hdst(ref_bytes.data(), {transposed ? cols : rows, transposed ? rows : cols}, to,
                      Device::cpu);
          DeviceTensor gdst({transposed ? cols : rows, transposed ? rows : cols}, to);
          Tensor hview = hdst, gview = gdst.view();
          if (transposed) {
            for (Tensor* t : {&hview, &gview}) {
              t->shape = {rows, cols, 0, 0};
              t->stride = {1, rows, 0, 0};
            }
          }
          cpu::cast(cpu(), hview, hsrc, scaled ? Tensor(hscale) : Tensor{});
          auto run = [&] {
            gdst.poison();
            cuda::cast(gpu(), gview, gsrc, scaled ? gscale.view() : Tensor{});
            return gdst.download_bytes();
          };
          const auto r1 = run();
          const auto r2 = run();
          size_t first = r1.size();
          for (size_t i = 0; i < r1.size() && first == r1.size(); ++i)
            if (r1[i] != ref_bytes[i]) first = i;
          INFO(tag << ": first differing byte " << first << " of " << r1.size());
          CHECK(first == r1.size());
          CHECK(r1 == r2);
        }
      }
    }
  }
}

TEST_CASE("amax and found_nonfinite match the CPU op", "[cuda][cast]") {
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{4097}, int64_t{1000003}}) {
    auto x = random_floats(n, 710 + n, -3.0f, 3.0f);
    for (bool with_nan : {false, true}) {
      if (with_nan) x[n / 2] = std::numeric_limits<float>::quiet_NaN();
      for (DType dtype : kFloatTypes) {
        HostTensor hx({n}, x);
        std::vector<unsigned char> bytes(n * dtype_size(dtype));
        Tensor hsrc(bytes.data(), {n}, dtype, Device::cpu);
        cpu::cast(cpu(), hsrc, hx, Tensor{});
        DeviceTensor gx({n}, dtype);
        gx.upload_bytes(bytes);
        HostTensor hmax({1}, {0.5f}), hflag({1}, {0.0f});
        cpu::amax(cpu(), hmax, hsrc);
        cpu::found_nonfinite(cpu(), hflag, hsrc);
        DeviceTensor gmax({1}), gflag({1});
        gmax.upload({0.5f});
        gflag.upload({0.0f});
        cuda::amax(gpu(), gmax, gx);
        cuda::found_nonfinite(gpu(), gflag, gx);
        const std::string tag = fmt::format("amax {} n={} nan={}", dtype_name(dtype), n, with_nan);
        expect_same_bits(tag, gmax.download(), hmax.data);
        expect_same_bits(tag + " found_nonfinite", gflag.download(), hflag.data);
      }
    }
  }
}

}  // namespace trainer::cuda_test
