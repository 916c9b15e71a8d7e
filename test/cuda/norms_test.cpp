// [cuda] LayerNorm and RMSNorm forward/backward against the CPU op on the same
// dtypes: fp32; bf16 / fp16 activations with fp32 weights (what mixed precision
// issues) or weights in the activations' dtype. Ragged widths; dweight/dbias
// (always fp32) accumulate onto an earlier micro-batch's gradient. Both kernel
// paths run for every dtype pair: 16-byte packs where every tensor is aligned and
// C is whole packs of each dtype, one element per lane elsewhere, and for a view
// shifted off 16-byte alignment (one tensor at a time).
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

struct NormCase {
  int64_t N, C;
};
// Packed: C a multiple of 8 (whole packs in fp32, bf16 and fp16). One element
// per lane: C = 1, 17, 4097, and 36 for 16-bit rows (whole fp32 packs only, so
// fp32 rows take packs there and the 16-bit rows with fp32 weights do not).
constexpr NormCase kCases[] = {{1, 1},      {1, 17},     {17, 36},    {17, 64},
                               {65, 4097},  {4097, 48},  {1, 64},     {4097, 64},
                               {1, 768},    {17, 768},   {4097, 768}, {1, 4096},
                               {17, 4096},  {4097, 4096}};
// On the emulator the largest (4097 x 4096: 16.8M elements, two thirds of each
// entry's time there) is left out; 4097 x 768 and 17 x 4096 cover its rows and steps.
bool skip(NormCase c) { return emulated() && c.N * c.C > (int64_t{1} << 24); }
// A packed width, run again with each tensor in turn one element into a larger
// buffer: that view must take the one-element kernel and still match.
constexpr NormCase kShiftedCase{17, 768};

struct NormDtypes {
  DType act;     // inp, out, dout, dinp
  DType weight;  // weight and bias
};
constexpr NormDtypes kDtypes[] = {{DType::f32, DType::f32},   {DType::bf16, DType::f32},
                                  {DType::bf16, DType::bf16}, {DType::f16, DType::f32},
                                  {DType::f16, DType::f16}};

// The tensor a run shifts by one element (kNone: none).
enum Shift : int { kNone = -1, kInp, kWeight, kBias, kDout, kOut, kDinp, kNumShifts };
constexpr const char* kShiftNames[] = {"inp", "weight", "bias", "dout", "out", "dinp"};
int64_t offset(int shift, Shift tensor) { return shift == tensor ? 1 : 0; }
std::string shift_tag(int shift) {
  return shift == kNone ? "" : fmt::format(" ({} shifted one element)", kShiftNames[shift]);
}

void check_layernorm(NormDtypes t, NormCase c, int shift) {
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

  DeviceTensor gx({c.N, c.C}, a, offset(shift, kInp)), gw({c.C}, t.weight, offset(shift, kWeight)),
      gb({c.C}, t.weight, offset(shift, kBias)), gdy({c.N, c.C}, a, offset(shift, kDout)),
      gy({c.N, c.C}, a, offset(shift, kOut)), gmean({c.N}), grstd({c.N}),
      gdx({c.N, c.C}, a, offset(shift, kDinp)), gdw({c.C}), gdb({c.C});
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
  const std::string tag = fmt::format("layernorm {} (weights {}) N={} C={}{}", dtype_name(a),
                                      dtype_name(t.weight), c.N, c.C, shift_tag(shift));
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

void check_rmsnorm(NormDtypes t, NormCase c, int shift) {
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

  DeviceTensor gx({c.N, c.C}, a, offset(shift, kInp)), gw({c.C}, t.weight, offset(shift, kWeight)),
      gdy({c.N, c.C}, a, offset(shift, kDout)), gy({c.N, c.C}, a, offset(shift, kOut)),
      grstd({c.N}), gdx({c.N, c.C}, a, offset(shift, kDinp)), gdw({c.C});
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
  const std::string tag = fmt::format("rmsnorm {} (weight {}) N={} C={}{}", dtype_name(a),
                                      dtype_name(t.weight), c.N, c.C, shift_tag(shift));
  const HostTensor* refs[] = {&hy, &hrstd, &hdx, &hdw};
  const char* names[] = {" out", " rstd", " dinp", " dweight"};
  const Tolerance tols[] = {narrow_tolerance(a, kF32Reduction, false), kF32Reduction,
                            narrow_tolerance(a, kF32Reduction, false), kF32LongSum};
  for (int i = 0; i < 4; ++i) {
    expect_close(tag + names[i], r1[i], refs[i]->values(), tols[i]);
    expect_same_bits(tag + names[i] + " rerun", r1[i], r2[i]);
  }
}

}  // namespace

TEST_CASE("layernorm forward/backward match the CPU op", "[cuda][layernorm]") {
  for (const NormDtypes t : kDtypes) {
    for (const NormCase c : kCases)
      if (!skip(c)) check_layernorm(t, c, kNone);
    for (int shift = 0; shift < kNumShifts; ++shift) check_layernorm(t, kShiftedCase, shift);
  }
}

TEST_CASE("rmsnorm forward/backward match the CPU op", "[cuda][rmsnorm]") {
  for (const NormDtypes t : kDtypes) {
    for (const NormCase c : kCases)
      if (!skip(c)) check_rmsnorm(t, c, kNone);
    for (int shift = 0; shift < kNumShifts; ++shift)
      if (shift != kBias) check_rmsnorm(t, kShiftedCase, shift);  // RMSNorm has no bias
  }
}

}  // namespace trainer::cuda_test
