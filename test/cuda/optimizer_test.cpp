// [cuda] AdamW and the sum of squares against the CPU op, plus the 64-bit indexing
// checks on tensors of more than 2^31 elements (exact expected values).
#include <cmath>
#include <cstring>

#include "kernels/adamw.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/norm.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {

TEST_CASE("adamw matches the CPU op", "[cuda][adamw]") {
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{4097}, int64_t{100003}}) {
    const auto p0 = random_floats(n, 500 + n), g = random_floats(n, 501 + n);
    const auto m0 = random_floats(n, 502 + n, -0.1f, 0.1f), v0 = random_floats(n, 503 + n, 0.0f, 0.01f);
    AdamWArgs args;
    args.lr = 3e-3f;
    args.weight_decay = 0.1f;
    args.step = 7;
    args.grad_scale = 0.5f;
    HostTensor hp({n}, p0), hg({n}, g), hm({n}, m0), hv({n}, v0);
    cpu::adamw_update(cpu(), hp, hg, hm, hv, args);
    DeviceTensor gp({n}), gg({n}), gm({n}), gv({n});
    gg.upload(g);
    auto run = [&] {
      gp.upload(p0);
      gm.upload(m0);
      gv.upload(v0);
      cuda::adamw_update(gpu(), gp, gg, gm, gv, args);
      return std::vector<std::vector<float>>{gp.download(), gm.download(), gv.download()};
    };
    const auto r1 = run();
    const auto r2 = run();
    const std::string tag = fmt::format("adamw n={}", n);
    expect_close(tag + " param", r1[0], hp.data, kF32Pointwise);
    expect_close(tag + " m", r1[1], hm.data, kF32Pointwise);
    expect_close(tag + " v", r1[2], hv.data, kF32Pointwise);
    for (int i = 0; i < 3; ++i) expect_same_bits(tag + " rerun", r1[i], r2[i]);
  }
}

TEST_CASE("sum_of_squares matches the CPU op and accumulates", "[cuda][norm]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{4097}, int64_t{3000017}}) {
    const auto x = round_to(random_floats(n, 600 + n), dtype);
    HostTensor hx({n}, x, dtype), hout({1}, {0.25f});
    cpu::sum_of_squares(cpu(), hout, hx);
    DeviceTensor gx({n}, dtype), gout({1});
    gx.upload(x);
    auto run = [&] {
      gout.upload({0.25f});
      cuda::sum_of_squares(gpu(), gout, gx);
      return gout.download();
    };
    const auto r1 = run();
    const auto r2 = run();
    expect_close(fmt::format("sum_of_squares {} n={}", dtype_name(dtype), n), r1, hout.data,
                 {0.0, 1e-6, 1e-6});
    expect_same_bits("sum_of_squares rerun", r1, r2);
  }
}

TEST_CASE("sum_values matches the CPU op and accumulates in double", "[cuda][norm]") {
  for (DType dtype : {DType::f32, DType::bf16})
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{4097}, int64_t{3000017}}) {
    const auto x = round_to(random_floats(n, 700 + n), dtype);
    HostTensor hx({n}, x, dtype);
    double want = 1e9;  // far above the sum: an fp32 accumulator would show
    cpu::sum_values(cpu(), Tensor(&want, {1}, DType::f64), hx);
    DeviceTensor gx({n}, dtype), gout({1}, DType::f64);
    gx.upload(x);
    auto run = [&] {
      const double start = 1e9;
      const auto* p = reinterpret_cast<const unsigned char*>(&start);
      gout.upload_bytes({p, p + sizeof(double)});
      cuda::sum_values(gpu(), gout, gx);
      const auto b = gout.download_bytes();
      double got = 0;
      std::memcpy(&got, b.data(), sizeof(double));
      return got;
    };
    const double r1 = run(), r2 = run();
    INFO("sum_values " << dtype_name(dtype) << " n=" << n);
    CHECK(r1 - 1e9 == Approx(want - 1e9).epsilon(1e-9).margin(1e-6));
    CHECK(r1 == r2);
  }
}

// More than 2^31 elements: an int32 index would wrap. Expected values are exact.
TEST_CASE("ops index tensors beyond 2^31 elements", "[cuda][large]") {
  const int64_t n = (int64_t{1} << 31) + 17;
  {
    DeviceTensor x({n});
    cuda::fill(gpu(), x, 1.0f);
    DeviceTensor out({1});
    out.upload({0.0f});
    cuda::sum_of_squares(gpu(), out, x);
    // The double sum is exact; one rounding to fp32.
    CHECK(out.download()[0] == static_cast<float>(static_cast<double>(n)));
  }
  {
    // Three rows of 2^30 + 3 logits, all equal: loss = log(V), dlogits = 1/V - onehot.
    const int64_t N = 3, Vp = (int64_t{1} << 30) + 3;
    DeviceTensor logits({N, Vp}), maxv({N}), sumexp({N}), tl({N}), loss({N}), dloss({N}),
        targets({N}, DType::i32);
    cuda::fill(gpu(), logits, 0.5f);
    std::vector<int32_t> t = {0, static_cast<int32_t>(Vp - 1), -1};
    targets.upload_ints(t);
    dloss.upload({1.0f, 1.0f, 1.0f});
    cuda::cross_entropy_max(gpu(), maxv, logits, 0, Vp);
    cuda::cross_entropy_sumexp(gpu(), sumexp, tl, logits, maxv, targets, 0, Vp);
    cuda::cross_entropy_loss(gpu(), loss, maxv, sumexp, tl, targets);
    cuda::cross_entropy_backward(gpu(), logits, logits, maxv, sumexp, targets, dloss, 0, Vp);
    const auto l = loss.download();
    CHECK(std::fabs(l[0] - std::log(static_cast<double>(Vp))) < 1e-5);
    CHECK(std::fabs(l[1] - std::log(static_cast<double>(Vp))) < 1e-5);
    CHECK(l[2] == 0.0f);
    // Read back single elements around and beyond index 2^31.
    auto at = [&](int64_t row, int64_t col) {
      float v = 0.0f;
      Tensor one = logits.view();
      one.data = static_cast<float*>(one.data) + row * Vp + col;
      copy_to_host(&v, Tensor(one.data, {1}, DType::f32, Device::cuda));
      return v;
    };
    const float p = static_cast<float>(1.0 / static_cast<double>(Vp));
    CHECK(std::fabs(at(0, 0) - (p - 1.0f)) < 1e-6f);
    CHECK(std::fabs(at(1, Vp - 1) - (p - 1.0f)) < 1e-6f);
    CHECK(std::fabs(at(1, 5) - p) < 1e-12f);
    CHECK(at(2, Vp - 1) == 0.0f);  // ignored target: zero gradient, past index 2^31
  }
}

}  // namespace trainer::cuda_test
