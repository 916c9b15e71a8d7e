// [cuda] LayerNorm and RMSNorm forward/backward against the CPU op on the same
// dtypes: fp32; bf16 / fp16 activations with fp32 weights (what mixed precision
// issues) or weights in the activations' dtype. Ragged widths; dweight/dbias
// (always fp32) accumulate onto an earlier micro-batch's gradient.
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

struct NormCase {
  int64_t N, C;
};
constexpr NormCase kCases[] = {{1, 1}, {1, 17}, {17, 64}, {65, 4097}, {4097, 48}};

struct NormDtypes {
  DType act;     // inp, out, dout, dinp
  DType weight;  // weight and bias
};
constexpr NormDtypes kDtypes[] = {{DType::f32, DType::f32},   {DType::bf16, DType::f32},
                                  {DType::bf16, DType::bf16}, {DType::f16, DType::f32},
                                  {DType::f16, DType::f16}};

}  // namespace

TEST_CASE("layernorm forward/backward match the CPU op", "[cuda][layernorm]") {
  for (const NormDtypes t : kDtypes) {
    for (const auto c : kCases) {
      const float eps = 1e-5f;
      const DType a = t.act;
      // An offset mean exercises the two-pass variance.
      const auto x = round_to(random_floats(c.N * c.C, 100 + c.C, 2.0f, 4.0f), a);
      const auto w = round_to(random_floats(c.C, 101), t.weight);
      const auto b = round_to(random_floats(c.C, 102), t.weight);
      const auto dy = round_to(random_floats(c.N * c.C, 103), a);
      const auto dw0 = random_floats(c.C, 104), db0 = random_floats(c.C, 105);
      HostTensor hx({c.N, c.C}, x, a), hw({c.C}, w, t.weight), hb({c.C}, b, t.weight),
          hdy({c.N, c.C}, dy, a);
      HostTensor hy({c.N, c.C}, std::vector<float>(c.N * c.C), a),
          hmean({c.N}, std::vector<float>(c.N)), hrstd({c.N}, std::vector<float>(c.N)),
          hdx({c.N, c.C}, std::vector<float>(c.N * c.C), a), hdw({c.C}, dw0), hdb({c.C}, db0);
      cpu::layernorm_forward(cpu(), hy, hmean, hrstd, hx, hw, hb, eps);
      cpu::layernorm_backward(cpu(), hdx, hdw, hdb, hdy, hx, hw, hmean, hrstd);

      DeviceTensor gx({c.N, c.C}, a), gw({c.C}, t.weight), gb({c.C}, t.weight),
          gdy({c.N, c.C}, a), gy({c.N, c.C}, a), gmean({c.N}), grstd({c.N}),
          gdx({c.N, c.C}, a), gdw({c.C}), gdb({c.C});
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
      const std::string tag = fmt::format("layernorm {} (weights {}) N={} C={}", dtype_name(a),
                                          dtype_name(t.weight), c.N, c.C);
      const HostTensor* refs[] = {&hy, &hmean, &hrstd, &hdx, &hdw, &hdb};
      const char* names[] = {" out", " mean", " rstd", " dinp", " dweight", " dbias"};
      // The statistics and parameter gradients are fp32 sums of the same
      // (rounded) inputs on both sides; out and dinp are rounded to `a` once.
      const Tolerance tols[] = {narrow_tolerance(a, kF32Reduction, false), kF32Reduction,
                                kF32Reduction, narrow_tolerance(a, kF32Reduction, false),
                                kF32LongSum, kF32LongSum};
      for (int i = 0; i < 6; ++i) {
        expect_close(tag + names[i], r1[i], refs[i]->values(), tols[i]);
        expect_same_bits(tag + names[i] + " rerun", r1[i], r2[i]);
      }
    }
  }
}

TEST_CASE("rmsnorm forward/backward match the CPU op", "[cuda][rmsnorm]") {
  for (const NormDtypes t : kDtypes) {
    for (const auto c : kCases) {
      const float eps = 1e-6f;
      const DType a = t.act;
      const auto x = round_to(random_floats(c.N * c.C, 110 + c.C), a);
      const auto w = round_to(random_floats(c.C, 111), t.weight);
      const auto dy = round_to(random_floats(c.N * c.C, 112), a);
      const auto dw0 = random_floats(c.C, 113);
      HostTensor hx({c.N, c.C}, x, a), hw({c.C}, w, t.weight), hdy({c.N, c.C}, dy, a);
      HostTensor hy({c.N, c.C}, std::vector<float>(c.N * c.C), a),
          hrstd({c.N}, std::vector<float>(c.N)),
          hdx({c.N, c.C}, std::vector<float>(c.N * c.C), a), hdw({c.C}, dw0);
      cpu::rmsnorm_forward(cpu(), hy, hrstd, hx, hw, eps);
      cpu::rmsnorm_backward(cpu(), hdx, hdw, hdy, hx, hw, hrstd);

      DeviceTensor gx({c.N, c.C}, a), gw({c.C}, t.weight), gdy({c.N, c.C}, a),
          gy({c.N, c.C}, a), grstd({c.N}), gdx({c.N, c.C}, a), gdw({c.C});
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
      const std::string tag = fmt::format("rmsnorm {} (weight {}) N={} C={}", dtype_name(a),
                                          dtype_name(t.weight), c.N, c.C);
      const HostTensor* refs[] = {&hy, &hrstd, &hdx, &hdw};
      const char* names[] = {" out", " rstd", " dinp", " dweight"};
      const Tolerance tols[] = {narrow_tolerance(a, kF32Reduction, false), kF32Reduction,
                                narrow_tolerance(a, kF32Reduction, false), kF32LongSum};
      for (int i = 0; i < 4; ++i) {
        expect_close(tag + names[i], r1[i], refs[i]->values(), tols[i]);
        expect_same_bits(tag + names[i] + " rerun", r1[i], r2[i]);
      }
    }
  }
}

}  // namespace trainer::cuda_test
