// [cuda][linear]: linear + GELU (cuBLASLt's GELU_AUX(_BIAS) and DGELU epilogues,
// or the fp32 GEMM plus one kernel where they cannot run) against the CPU op:
// fp32, bf16 / fp16 with an fp32 bias (mixed precision: never the forward
// epilogue) or one in their dtype; widths that are and are not multiples of 8
// (the epilogue's aux leading dimension), with and without the epilogues.
#include "kernels/linear_gelu.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

struct GeluCase {
  int64_t M, K, N;
  bool bias;
};

void run_forward(const GeluCase& c, DType act, DType bias_dtype) {
  const auto x = round_to(random_floats(c.M * c.K, 11, -2.0f, 2.0f), act);
  const auto w = round_to(random_floats(c.N * c.K, 12, -0.5f, 0.5f), act);
  const auto b = round_to(random_floats(c.N, 13), bias_dtype);
  HostTensor hx({c.M, c.K}, x, act), hw({c.N, c.K}, w, act), hb({c.N}, b, bias_dtype);
  HostTensor hact({c.M, c.N}, std::vector<float>(c.M * c.N), act),
      hpre({c.M, c.N}, std::vector<float>(c.M * c.N), act);
  cpu::linear_gelu_forward(cpu(), hact, hpre, hx, hw, c.bias ? Tensor(hb) : Tensor{});

  DeviceTensor dx({c.M, c.K}, act), dw({c.N, c.K}, act), db({c.N}, bias_dtype);
  DeviceTensor dact({c.M, c.N}, act), dpre({c.M, c.N}, act);
  dx.upload(x);
  dw.upload(w);
  db.upload(b);
  auto run = [&] {
    dact.poison();
    dpre.poison();
    cuda::linear_gelu_forward(gpu(), dact, dpre, dx, dw, c.bias ? db.view() : Tensor{});
    return std::vector<std::vector<float>>{dact.download(), dpre.download()};
  };
  const auto r1 = run();
  const auto r2 = run();
  const Tolerance tol = narrow_tolerance(act, kF32Reduction, true);
  const std::string tag =
      fmt::format("linear_gelu_forward {} (bias {}) M={} K={} N={} bias={} {}",
                  dtype_name(act), dtype_name(bias_dtype), c.M, c.K, c.N, c.bias,
                  staging_mode_name());
  expect_close(tag + " act", r1[0], hact.values(), tol);
  expect_close(tag + " pre", r1[1], hpre.values(), tol);
  for (int i = 0; i < 2; ++i) expect_same_bits(tag + " rerun " + std::to_string(i), r1[i], r2[i]);
}

// The proj layer's backward: dout (M, N), its input act (M, K) = gelu(pre), weight (N, K).
void run_backward(const GeluCase& c, DType act) {
  const auto dy = round_to(random_floats(c.M * c.N, 21), act);
  const auto a = round_to(random_floats(c.M * c.K, 22), act);
  const auto w = round_to(random_floats(c.N * c.K, 23, -0.5f, 0.5f), act);
  const auto p = round_to(random_floats(c.M * c.K, 24, -3.0f, 3.0f), act);
  const auto dw0 = random_floats(c.N * c.K, 25);  // earlier micro-batch's gradient
  const auto db0 = random_floats(c.N, 26);
  HostTensor hdy({c.M, c.N}, dy, act), ha({c.M, c.K}, a, act), hw({c.N, c.K}, w, act),
      hp({c.M, c.K}, p, act);
  HostTensor hdpre({c.M, c.K}, std::vector<float>(c.M * c.K), act), hdw({c.N, c.K}, dw0),
      hdb({c.N}, db0);
  cpu::linear_dgelu_backward(cpu(), hdpre, hdw, c.bias ? Tensor(hdb) : Tensor{}, hdy, ha, hw, hp);

  DeviceTensor ddy({c.M, c.N}, act), da({c.M, c.K}, act), dwt({c.N, c.K}, act), dp({c.M, c.K}, act);
  DeviceTensor ddpre({c.M, c.K}, act), ddw({c.N, c.K}, DType::f32), ddb({c.N}, DType::f32);
  ddy.upload(dy);
  da.upload(a);
  dwt.upload(w);
  dp.upload(p);
  auto run = [&] {
    ddpre.poison();
    ddw.upload(dw0);
    ddb.upload(db0);
    cuda::linear_dgelu_backward(gpu(), ddpre, ddw, c.bias ? ddb.view() : Tensor{}, ddy, da, dwt, dp);
    return std::vector<std::vector<float>>{ddpre.download(), ddw.download(), ddb.download()};
  };
  const auto r1 = run();
  const auto r2 = run();
  const std::string tag = fmt::format("linear_dgelu_backward {} M={} K={} N={} bias={} {}",
                                      dtype_name(act), c.M, c.K, c.N, c.bias,
                                      staging_mode_name());
  expect_close(tag + " dpre", r1[0], hdpre.values(), narrow_tolerance(act, kF32Reduction, true));
  const Tolerance acc_tol = narrow_tolerance(act, kF32LongSum, true);
  expect_close(tag + " dweight", r1[1], hdw.data, acc_tol);
  if (c.bias) expect_close(tag + " dbias", r1[2], hdb.data, acc_tol);
  else expect_same_bits(tag + " dbias untouched", r1[2], db0);
  for (int i = 0; i < 3; ++i) expect_same_bits(tag + " rerun " + std::to_string(i), r1[i], r2[i]);
}

// N (forward) and K (backward) multiples of 8 take the epilogue; 17 and 1 do not.
const GeluCase kCases[] = {
    {1, 1, 1, true},    {17, 17, 17, true},  {17, 64, 96, false},
    {64, 96, 17, true}, {33, 128, 520, true}, {1031, 32, 48, true},
};

void run_all(DType act, DType bias_dtype) {
  for (const StagingMode& mode : kStagingModes) {
    const ScopedStaging scoped(mode);
    for (const auto& c : kCases) {
      run_forward(c, act, bias_dtype);
      run_backward(c, act);
    }
  }
}

}  // namespace

TEST_CASE("linear + GELU fp32 matches the CPU op", "[cuda][linear][linear_gelu]") {
  run_all(DType::f32, DType::f32);
}

TEST_CASE("linear + GELU bf16 matches the CPU op", "[cuda][linear][linear_gelu][bf16]") {
  run_all(DType::bf16, DType::f32);  // mixed precision: fp32 bias
  run_all(DType::bf16, DType::bf16);
}

TEST_CASE("linear + GELU fp16 matches the CPU op", "[cuda][linear][linear_gelu][fp16]") {
  run_all(DType::f16, DType::f32);
  run_all(DType::f16, DType::f16);
}

}  // namespace trainer::cuda_test
