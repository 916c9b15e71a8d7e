// [cuda][linear]: cuBLASLt linear forward/backward against the CPU op, fp32 and bf16,
// ragged shapes, bias on/off, dinp skipped or not, accumulation into dweight/dbias.
#include "kernels/linear.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

struct LinearCase {
  int64_t M, K, N;
  bool bias, dinp;
};

void run_linear(const LinearCase& c, DType dtype) {
  const bool bf16 = dtype == DType::bf16;
  auto in = [&](std::vector<float> v) { return bf16 ? round_bf16(std::move(v)) : v; };
  const auto x = in(random_floats(c.M * c.K, 1));
  const auto w = in(random_floats(c.N * c.K, 2, -0.5f, 0.5f));
  const auto b = in(random_floats(c.N, 3));
  const auto dy = in(random_floats(c.M * c.N, 4));
  const auto dw0 = random_floats(c.N * c.K, 5);  // earlier micro-batch's gradient
  const auto db0 = random_floats(c.N, 6);

  HostTensor hx({c.M, c.K}, x), hw({c.N, c.K}, w), hb({c.N}, b), hdy({c.M, c.N}, dy);
  HostTensor hy({c.M, c.N}, std::vector<float>(c.M * c.N)), hdx({c.M, c.K}, std::vector<float>(c.M * c.K));
  HostTensor hdw({c.N, c.K}, dw0), hdb({c.N}, db0);
  cpu::linear_forward(cpu(), hy, hx, hw, c.bias ? Tensor(hb) : Tensor{});
  cpu::linear_backward(cpu(), c.dinp ? Tensor(hdx) : Tensor{}, hdw, c.bias ? Tensor(hdb) : Tensor{},
                       hdy, hx, hw);

  DeviceTensor dx_({c.M, c.K}, dtype), dw_({c.N, c.K}, dtype), db_({c.N}, dtype), ddy({c.M, c.N}, dtype);
  DeviceTensor dy_out({c.M, c.N}, dtype), ddx({c.M, c.K}, dtype);
  DeviceTensor ddw({c.N, c.K}, DType::f32), ddb({c.N}, DType::f32);
  dx_.upload(x);
  dw_.upload(w);
  db_.upload(b);
  ddy.upload(dy);
  auto run = [&] {
    dy_out.poison();
    ddx.poison();
    ddw.upload(dw0);
    ddb.upload(db0);
    cuda::linear_forward(gpu(), dy_out, dx_, dw_, c.bias ? db_.view() : Tensor{});
    cuda::linear_backward(gpu(), c.dinp ? ddx.view() : Tensor{}, ddw, c.bias ? ddb.view() : Tensor{},
                          ddy, dx_, dw_);
    return std::vector<std::vector<float>>{dy_out.download(), ddx.download(), ddw.download(),
                                           ddb.download()};
  };
  const auto r1 = run();
  const auto r2 = run();
  const Tolerance tol = bf16 ? kBf16Gemm : kF32Reduction;
  const std::string tag = fmt::format("linear {} M={} K={} N={} bias={} dinp={} epilogues={}",
                                      dtype_name(dtype), c.M, c.K, c.N, c.bias, c.dinp,
                                      gpu().cuda->gemm_epilogues);
  expect_close(tag + " out", r1[0], hy.data, tol);
  if (c.dinp) expect_close(tag + " dinp", r1[1], hdx.data, tol);
  // dweight/dbias are fp32 accumulators: the bf16 case differs only by its inputs.
  expect_close(tag + " dweight", r1[2], hdw.data, bf16 ? kBf16Gemm : kF32LongSum);
  if (c.bias) expect_close(tag + " dbias", r1[3], hdb.data, bf16 ? kBf16Gemm : kF32LongSum);
  else expect_same_bits(tag + " dbias untouched", r1[3], db0);
  for (int i = 0; i < 4; ++i) expect_same_bits(tag + " rerun " + std::to_string(i), r1[i], r2[i]);
}

const LinearCase kCases[] = {
    {1, 1, 1, true, true},      {1, 17, 1, true, true},    {17, 17, 17, true, false},
    {17, 64, 96, false, true},  {64, 96, 17, true, true},  {33, 128, 4097, true, true},
    {4097, 32, 48, true, true},
};

}  // namespace

// Both branches: cuBLASLt's bias epilogues, and the fallback kernels.
TEST_CASE("linear fp32 matches the CPU op", "[cuda][linear]") {
  for (bool epilogues : {true, false}) {
    gpu().cuda->gemm_epilogues = epilogues;
    for (const auto& c : kCases) run_linear(c, DType::f32);
  }
  gpu().cuda->gemm_epilogues = true;
}

TEST_CASE("linear bf16 matches the CPU op on bf16 inputs", "[cuda][linear][bf16]") {
  for (bool epilogues : {true, false}) {
    gpu().cuda->gemm_epilogues = epilogues;
    for (const auto& c : kCases) run_linear(c, DType::bf16);
  }
  gpu().cuda->gemm_epilogues = true;
}

}  // namespace trainer::cuda_test
