// [cuda] LayerNorm and RMSNorm forward/backward against the CPU op, fp32, ragged
// widths; dweight/dbias accumulate onto an earlier micro-batch's gradient.
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

struct NormCase {
  int64_t N, C;
};
constexpr NormCase kCases[] = {{1, 1}, {1, 17}, {17, 64}, {65, 4097}, {4097, 48}};

}  // namespace

TEST_CASE("layernorm forward/backward match the CPU op", "[cuda][layernorm]") {
  for (const auto c : kCases) {
    const float eps = 1e-5f;
    // An offset mean exercises the two-pass variance.
    const auto x = random_floats(c.N * c.C, 100 + c.C, 2.0f, 4.0f);
    const auto w = random_floats(c.C, 101), b = random_floats(c.C, 102);
    const auto dy = random_floats(c.N * c.C, 103);
    const auto dw0 = random_floats(c.C, 104), db0 = random_floats(c.C, 105);
    HostTensor hx({c.N, c.C}, x), hw({c.C}, w), hb({c.C}, b), hdy({c.N, c.C}, dy);
    HostTensor hy({c.N, c.C}, std::vector<float>(c.N * c.C)), hmean({c.N}, std::vector<float>(c.N)),
        hrstd({c.N}, std::vector<float>(c.N)), hdx({c.N, c.C}, std::vector<float>(c.N * c.C)),
        hdw({c.C}, dw0), hdb({c.C}, db0);
    cpu::layernorm_forward(cpu(), hy, hmean, hrstd, hx, hw, hb, eps);
    cpu::layernorm_backward(cpu(), hdx, hdw, hdb, hdy, hx, hw, hmean, hrstd);

    DeviceTensor gx({c.N, c.C}), gw({c.C}), gb({c.C}), gdy({c.N, c.C}), gy({c.N, c.C}),
        gmean({c.N}), grstd({c.N}), gdx({c.N, c.C}), gdw({c.C}), gdb({c.C});
    gx.upload(x);
    gw.upload(w);
    gb.upload(b);
    gdy.upload(dy);
    auto run = [&] {
      for (DeviceTensor* t : {&gy, &gmean, &grstd, &gdx}) t->poison();
      gdw.upload(dw0);
      gdb.upload(db0);
      cuda::layernorm_forward(gpu(), gy, gmean, grstd, gx, gw, gb, eps);
      cuda::layernorm_backward(gpu(), gdx, gdw, gdb, gdy, gx, gw, gmean, grstd);
      std::vector<std::vector<float>> r;
      for (DeviceTensor* t : {&gy, &gmean, &grstd, &gdx, &gdw, &gdb}) r.push_back(t->download());
      return r;
    };
    const auto r1 = run();
    const auto r2 = run();
    const std::string tag = fmt::format("layernorm N={} C={}", c.N, c.C);
    const HostTensor* refs[] = {&hy, &hmean, &hrstd, &hdx, &hdw, &hdb};
    const char* names[] = {" out", " mean", " rstd", " dinp", " dweight", " dbias"};
    for (int i = 0; i < 6; ++i) {
      expect_close(tag + names[i], r1[i], refs[i]->data, i >= 4 ? kF32LongSum : kF32Reduction);
      expect_same_bits(tag + names[i] + " rerun", r1[i], r2[i]);
    }
  }
}

TEST_CASE("rmsnorm forward/backward match the CPU op", "[cuda][rmsnorm]") {
  for (const auto c : kCases) {
    const float eps = 1e-6f;
    const auto x = random_floats(c.N * c.C, 110 + c.C);
    const auto w = random_floats(c.C, 111);
    const auto dy = random_floats(c.N * c.C, 112);
    const auto dw0 = random_floats(c.C, 113);
    HostTensor hx({c.N, c.C}, x), hw({c.C}, w), hdy({c.N, c.C}, dy);
    HostTensor hy({c.N, c.C}, std::vector<float>(c.N * c.C)), hrstd({c.N}, std::vector<float>(c.N)),
        hdx({c.N, c.C}, std::vector<float>(c.N * c.C)), hdw({c.C}, dw0);
    cpu::rmsnorm_forward(cpu(), hy, hrstd, hx, hw, eps);
    cpu::rmsnorm_backward(cpu(), hdx, hdw, hdy, hx, hw, hrstd);

    DeviceTensor gx({c.N, c.C}), gw({c.C}), gdy({c.N, c.C}), gy({c.N, c.C}), grstd({c.N}),
        gdx({c.N, c.C}), gdw({c.C});
    gx.upload(x);
    gw.upload(w);
    gdy.upload(dy);
    auto run = [&] {
      for (DeviceTensor* t : {&gy, &grstd, &gdx}) t->poison();
      gdw.upload(dw0);
      cuda::rmsnorm_forward(gpu(), gy, grstd, gx, gw, eps);
      cuda::rmsnorm_backward(gpu(), gdx, gdw, gdy, gx, gw, grstd);
      std::vector<std::vector<float>> r;
      for (DeviceTensor* t : {&gy, &grstd, &gdx, &gdw}) r.push_back(t->download());
      return r;
    };
    const auto r1 = run();
    const auto r2 = run();
    const std::string tag = fmt::format("rmsnorm N={} C={}", c.N, c.C);
    const HostTensor* refs[] = {&hy, &hrstd, &hdx, &hdw};
    const char* names[] = {" out", " rstd", " dinp", " dweight"};
    for (int i = 0; i < 4; ++i) {
      expect_close(tag + names[i], r1[i], refs[i]->data, i == 3 ? kF32LongSum : kF32Reduction);
      expect_same_bits(tag + names[i] + " rerun", r1[i], r2[i]);
    }
  }
}

}  // namespace trainer::cuda_test
