// [cuda][linear]: cuBLASLt linear forward/backward against the CPU op on the same
// dtypes: fp32, and bf16 / fp16 operands with an fp32 bias and fp32 weight
// gradient (what mixed precision issues) or a bias in the operands' dtype;
// ragged shapes, bias on/off, dinp skipped or not, accumulation into dweight/dbias.
#include "kernels/linear.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

struct LinearCase {
  int64_t M, K, N;
  bool bias, dinp;
};

struct LinearDtypes {
  DType act;   // inp, weight, out, dout, dinp
  DType bias;  // bias (dbias is always fp32)
};

void run_linear(const LinearCase& c, LinearDtypes t) {
  const DType act = t.act;
  const auto x = round_to(random_floats(c.M * c.K, 1), act);
  const auto w = round_to(random_floats(c.N * c.K, 2, -0.5f, 0.5f), act);
  const auto b = round_to(random_floats(c.N, 3), t.bias);
  const auto dy = round_to(random_floats(c.M * c.N, 4), act);
  const auto dw0 = random_floats(c.N * c.K, 5);  // earlier micro-batch's gradient
  const auto db0 = random_floats(c.N, 6);

  HostTensor hx({c.M, c.K}, x, act), hw({c.N, c.K}, w, act), hb({c.N}, b, t.bias),
      hdy({c.M, c.N}, dy, act);
  HostTensor hy({c.M, c.N}, std::vector<float>(c.M * c.N), act),
      hdx({c.M, c.K}, std::vector<float>(c.M * c.K), act);
  HostTensor hdw({c.N, c.K}, dw0), hdb({c.N}, db0);
  cpu::linear_forward(cpu(), hy, hx, hw, c.bias ? Tensor(hb) : Tensor{});
  cpu::linear_backward(cpu(), c.dinp ? Tensor(hdx) : Tensor{}, hdw, c.bias ? Tensor(hdb) : Tensor{},
                       hdy, hx, hw);

  DeviceTensor dx_({c.M, c.K}, act), dw_({c.N, c.K}, act), db_({c.N}, t.bias), ddy({c.M, c.N}, act);
  DeviceTensor dy_out({c.M, c.N}, act), ddx({c.M, c.K}, act);
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
  const Tolerance tol = narrow_tolerance(act, kF32Reduction, true);
  // dweight/dbias are fp32 accumulators of 16-bit products: tensor cores sum
  // them in an order (and with an alignment of partial sums) OpenBLAS does not,
  // so they get the operands' GEMM bound rather than fp32's.
  const Tolerance acc_tol = narrow_tolerance(act, kF32LongSum, true);
  const std::string tag = fmt::format("linear {} (bias {}) M={} K={} N={} bias={} dinp={} {}",
                                      dtype_name(act), dtype_name(t.bias), c.M, c.K, c.N, c.bias,
                                      c.dinp, staging_mode_name());
  expect_close(tag + " out", r1[0], hy.values(), tol);
  if (c.dinp) expect_close(tag + " dinp", r1[1], hdx.values(), tol);
  expect_close(tag + " dweight", r1[2], hdw.data, acc_tol);
  if (c.bias) expect_close(tag + " dbias", r1[3], hdb.data, acc_tol);
  else expect_same_bits(tag + " dbias untouched", r1[3], db0);
  for (int i = 0; i < 4; ++i) expect_same_bits(tag + " rerun " + std::to_string(i), r1[i], r2[i]);
}

const LinearCase kCases[] = {
    {1, 1, 1, true, true},      {1, 17, 1, true, true},    {17, 17, 17, true, false},
    {17, 64, 96, false, true},  {64, 96, 17, true, true},  {33, 128, 4097, true, true},
    {4097, 32, 48, true, true}, {5, 8, 0, true, true},  // N = 0: dinp zeroed
};

// Both branches: cuBLASLt's bias epilogues, and the fallback kernels, whose fp32
// staging also runs in blocks of 16 rows (staged_gemm.cuh).
void run_all(LinearDtypes t) {
  for (const StagingMode& mode : kStagingModes) {
    const ScopedStaging scoped(mode);
    for (const auto& c : kCases) run_linear(c, t);
  }
}

}  // namespace

TEST_CASE("linear fp32 matches the CPU op", "[cuda][linear]") {
  run_all({DType::f32, DType::f32});
}

TEST_CASE("linear bf16 matches the CPU op", "[cuda][linear][bf16]") {
  run_all({DType::bf16, DType::f32});  // mixed precision: fp32 bias
  run_all({DType::bf16, DType::bf16});
}

TEST_CASE("linear fp16 matches the CPU op", "[cuda][linear][fp16]") {
  run_all({DType::f16, DType::f32});
  run_all({DType::f16, DType::f16});
}

#ifdef TRAINER_CUDA_EMULATOR
// The real cuBLASLt may have no algorithm for an epilogue at some shape; the ops
// then take their fallback (checked against the CPU op inside run_linear), and
// gemm.cpp remembers the refusal: a second run asks the heuristic nothing. A
// shape no other case uses, so no earlier test has cached an algorithm for it.
TEST_CASE("linear falls back when cuBLASLt refuses its epilogues, and asks once",
          "[cuda][linear][bf16]") {
  struct Refusing {
    Refusing() { cuda_emu_cublaslt_refuse_epilogues(true); }
    ~Refusing() { cuda_emu_cublaslt_refuse_epilogues(false); }
  } refusing;
  const LinearCase c{37, 56, 40, true, true};
  const uint64_t before = cuda_emu_cublaslt_heuristic_calls();
  run_linear(c, {DType::bf16, DType::bf16});
  const uint64_t first = cuda_emu_cublaslt_heuristic_calls() - before;
  CHECK(first >= 4);  // bias, bias gradient (refused) and their plain GEMMs
  run_linear(c, {DType::bf16, DType::bf16});
  CHECK(cuda_emu_cublaslt_heuristic_calls() - before == first);
}
#endif

}  // namespace trainer::cuda_test
