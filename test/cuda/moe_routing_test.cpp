// [cuda] MoE routing ops against the CPU op: router forward/backward, the dispatch
// plan, gather/combine and their backwards. Both backends get the same bytes in
// the same dtypes (the CPU op takes fp32/bf16/fp16 arguments itself), so integer
// outputs must be equal and the copies and k-ordered sums bit-identical; float
// outputs with a different summation order within the suite's tolerances. Sizes
// ragged (1, 17, 4097 tokens and a half-million-assignment plan), E in {4, 8, 64,
// 256}, K in {1, 2, 8}, with and without capacity, `taken`, select_bias; the
// shared capacity's run loads and `taken`; every op run twice on poisoned outputs.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>

#include "kernels/elementwise.h"
#include "kernels/error.h"
#include "kernels/moe_capacity.h"
#include "kernels/moe_routing.h"
#include "kernels/numeric.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

constexpr int64_t kTokens[] = {1, 17, 4097};

std::vector<unsigned char> encode(const std::vector<float>& v, DType dtype) {
  std::vector<unsigned char> b(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(b.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dtype == DType::bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

std::vector<float> decode(const std::vector<unsigned char>& b, DType dtype) {
  std::vector<float> v(b.size() / dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(&v[i], b.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      v[i] = dtype == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return v;
}

// One float argument on both backends: host bytes for the CPU op and a device
// copy, optionally `offset` elements into its allocation (a base pointer that is
// not 16-byte aligned, which must take the element-wise kernels).
class FloatArg {
 public:
  FloatArg(std::initializer_list<int64_t> shape, DType dtype, const std::vector<float>& values,
           int64_t offset = 0)
      : dtype_(dtype),
        initial_(encode(values, dtype)),
        host_(initial_),
        cpu_(host_.data(), shape, dtype, Device::cpu),
        storage_({static_cast<int64_t>(values.size()) + offset},
                 dtype == DType::f32 ? DType::f32 : DType::bf16) {
    REQUIRE(static_cast<int64_t>(values.size()) == cpu_.numel());
    gpu_ = Tensor(static_cast<unsigned char*>(storage_.view().data) + offset * dtype_size(dtype),
                  shape, dtype, Device::cuda);
    reset();
  }
  Tensor cpu() const { return cpu_; }
  Tensor gpu() const { return gpu_; }
  DType dtype() const { return dtype_; }
  // The device copy back to the initial values (an accumulated output's earlier contents).
  void reset() { copy_from_host(gpu_, initial_.data()); }
  void poison() {
    const std::vector<unsigned char> nan(gpu_.nbytes(), 0xFF);  // NaN in fp32, bf16 and fp16
    copy_from_host(gpu_, nan.data());
  }
  std::vector<float> cpu_values() const { return decode(host_, dtype_); }
  std::vector<float> gpu_values() const {
    std::vector<unsigned char> b(gpu_.nbytes());
    copy_to_host(b.data(), gpu_);
    return decode(b, dtype_);
  }

 private:
  DType dtype_;
  std::vector<unsigned char> initial_, host_;
  Tensor cpu_, gpu_;
  DeviceTensor storage_;  // 16-bit dtypes share bf16's element size
};

// An i32 tensor on both backends.
class IntArg {
 public:
  IntArg(std::initializer_list<int64_t> shape, std::vector<int32_t> values)
      : host_(std::move(values)), cpu_(host_.data(), shape, DType::i32, Device::cpu),
        dev_(shape, DType::i32) {
    REQUIRE(static_cast<int64_t>(host_.size()) == cpu_.numel());
    dev_.upload_ints(host_);
  }
  Tensor cpu() const { return cpu_; }
  Tensor gpu() const { return dev_.view(); }
  const std::vector<int32_t>& cpu_values() const { return host_; }
  // A value no op writes (-1 is a real slot_src / assign_slot value).
  void poison() { dev_.upload_bytes(std::vector<unsigned char>(dev_.view().nbytes(), 0x5A)); }
  std::vector<int32_t> gpu_values() const {
    std::vector<int32_t> v(host_.size());
    copy_to_host(v.data(), dev_.view());
    return v;
  }

 private:
  std::vector<int32_t> host_;
  Tensor cpu_;
  DeviceTensor dev_;
};

void expect_equal_ints(const std::string& what, const std::vector<int32_t>& got,
                       const std::vector<int32_t>& ref) {
  REQUIRE(got.size() == ref.size());
  size_t first = got.size();
  for (size_t i = 0; i < got.size() && first == got.size(); ++i)
    if (got[i] != ref[i]) first = i;
  INFO(what << ": first difference at index " << first << " of " << got.size() << ": got "
            << (first < got.size() ? got[first] : 0) << ", ref "
            << (first < got.size() ? ref[first] : 0));
  CHECK(first == got.size());
}

Tolerance pointwise(DType dtype) { return dtype == DType::f32 ? kF32Pointwise : kBf16Pointwise; }
Tolerance reduction(DType dtype) { return dtype == DType::f32 ? kF32Reduction : kBf16Pointwise; }

// Router logits: even rows on a coarse grid (many exact ties, which both
// backends must break towards the lower expert), odd rows continuous.
std::vector<float> router_logits(int64_t N, int64_t E, uint64_t seed) {
  auto v = random_floats(N * E, seed, -4.0f, 4.0f);
  for (int64_t n = 0; n < N; n += 2)
    for (int64_t e = 0; e < E; ++e) v[n * E + e] = std::round(v[n * E + e] * 2.0f) / 4.0f;
  return v;
}

// Top-k choices for the plan: skewed towards low experts (uneven loads, so a
// capacity drops some), repeats within a token allowed (the plan takes any).
std::vector<int32_t> skewed_choices(int64_t M, int64_t E, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(E - 1));
  std::vector<int32_t> v(M);
  for (int32_t& e : v) e = std::min(dist(rng), dist(rng));
  return v;
}

struct RouteDtypes {
  DType logits, probs, weight, bias;
  const char* name;
};

}  // namespace

TEST_CASE("moe_route_forward/backward match the CPU op", "[cuda][moe]") {
  const RouteDtypes kDtypes[] = {
      {DType::f32, DType::f32, DType::f32, DType::f32, "fp32"},
      {DType::bf16, DType::bf16, DType::bf16, DType::bf16, "bf16"},
      {DType::f16, DType::bf16, DType::f32, DType::bf16, "mixed"},
  };
  for (const RouteDtypes& dt : kDtypes)
    for (int64_t N : kTokens)
      for (int64_t E : {4, 8, 64})
        for (int64_t K : {1, 2, 8}) {
          if (K > E) continue;
          for (int variant = 0; variant < 8; ++variant) {
            if (emulated() && N > 1000 && !(E == 64 && K == 8 && variant == 7)) continue;
            const bool sigmoid = variant & 1, with_bias = variant & 2, normalize = variant & 4;
            // The z-loss term, on half the variants (each score function with it).
            const bool z_loss = sigmoid != with_bias;
            const std::string tag =
                fmt::format("moe_route {} N={} E={} K={} {}{}{}", dt.name, N, E, K,
                            sigmoid ? "sigmoid" : "softmax", with_bias ? " bias" : "",
                            normalize ? " normalized" : "");
            const uint64_t seed = 1000 * N + 100 * E + 10 * K + variant;
            FloatArg logits({N, E}, dt.logits, router_logits(N, E, seed));
            FloatArg bias({E}, dt.bias, [&] {
              auto b = random_floats(E, seed + 1, -0.25f, 0.25f);
              for (float& x : b) x = std::round(x * 32.0f) / 32.0f;
              return b;
            }());
            FloatArg probs({N, E}, dt.probs, std::vector<float>(N * E));
            FloatArg weight({N, K}, dt.weight, std::vector<float>(N * K));
            IntArg idx({N, K}, std::vector<int32_t>(N * K));
            cpu::moe_route_forward(cpu(), probs.cpu(), idx.cpu(), weight.cpu(), logits.cpu(),
                                   with_bias ? bias.cpu() : Tensor{}, sigmoid, normalize);

            // Backward from the CPU forward's outputs.
            FloatArg bprobs({N, E}, dt.probs, probs.cpu_values());
            IntArg bidx({N, K}, idx.cpu_values());
            FloatArg dweight({N, K}, dt.weight, random_floats(N * K, seed + 2));
            FloatArg dlogits({N, E}, dt.logits, std::vector<float>(N * E));
            const float z_grad = z_loss ? 0.01f : 0.0f;
            cpu::moe_route_backward(cpu(), dlogits.cpu(), dweight.cpu(), logits.cpu(),
                                    bprobs.cpu(), bidx.cpu(), z_grad, sigmoid, normalize);

            auto run = [&] {
              probs.poison();
              weight.poison();
              idx.poison();
              dlogits.poison();
              cuda::moe_route_forward(gpu(), probs.gpu(), idx.gpu(), weight.gpu(), logits.gpu(),
                                      with_bias ? bias.gpu() : Tensor{}, sigmoid, normalize);
              cuda::moe_route_backward(gpu(), dlogits.gpu(), dweight.gpu(), logits.gpu(),
                                       bprobs.gpu(), bidx.gpu(), z_grad, sigmoid, normalize);
              return std::tuple{probs.gpu_values(), weight.gpu_values(), idx.gpu_values(),
                                dlogits.gpu_values()};
            };
            const auto [p1, w1, i1, d1] = run();
            const auto [p2, w2, i2, d2] = run();
            expect_equal_ints(tag + " topk_idx", i1, idx.cpu_values());
            expect_close(tag + " probs", p1, probs.cpu_values(), pointwise(dt.probs));
            expect_close(tag + " topk_weight", w1, weight.cpu_values(), pointwise(dt.weight));
            expect_close(tag + " dlogits", d1, dlogits.cpu_values(), reduction(dt.logits));
            expect_equal_ints(tag + " topk_idx rerun", i1, i2);
            expect_same_bits(tag + " probs rerun", p1, p2);
            expect_same_bits(tag + " topk_weight rerun", w1, w2);
            expect_same_bits(tag + " dlogits rerun", d1, d2);
          }
        }
}

TEST_CASE("moe_route_forward with route groups matches the CPU op", "[cuda][moe]") {
  struct Case {
    int64_t E, G, top, K;
  };
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t N : kTokens)
      for (const Case c : {Case{8, 4, 2, 3}, Case{64, 8, 4, 8}, Case{256, 8, 4, 8}, Case{80, 40, 3, 6}})
        for (int variant = 0; variant < 4; ++variant) {
          if (emulated() && N > 1000 && !(c.E == 256 && variant == 3)) continue;
          const bool sigmoid = variant & 1, with_bias = variant & 2;
          const std::string tag = fmt::format("moe_route groups {} N={} E={} G={} top={} K={} {}{}",
                                              dtype_name(dtype), N, c.E, c.G, c.top, c.K,
                                              sigmoid ? "sigmoid" : "softmax", with_bias ? " bias" : "");
          const int64_t E = c.E, K = c.K;
          const uint64_t seed = 7000 + 1000 * N + 10 * E + variant;
          FloatArg logits({N, E}, dtype, router_logits(N, E, seed));
          FloatArg bias({E}, dtype, [&] {
            auto b = random_floats(E, seed + 1, -0.25f, 0.25f);
            for (float& x : b) x = std::round(x * 32.0f) / 32.0f;
            return b;
          }());
          FloatArg probs({N, E}, dtype, std::vector<float>(N * E));
          FloatArg weight({N, K}, dtype, std::vector<float>(N * K));
          IntArg idx({N, K}, std::vector<int32_t>(N * K));
          const RouteGroups groups{c.G, c.top};
          cpu::moe_route_forward(cpu(), probs.cpu(), idx.cpu(), weight.cpu(), logits.cpu(),
                                 with_bias ? bias.cpu() : Tensor{}, sigmoid, true, groups);
          auto run = [&] {
            probs.poison();
            weight.poison();
            idx.poison();
            cuda::moe_route_forward(gpu(), probs.gpu(), idx.gpu(), weight.gpu(), logits.gpu(),
                                    with_bias ? bias.gpu() : Tensor{}, sigmoid, true, groups);
            return std::tuple{weight.gpu_values(), idx.gpu_values()};
          };
          const auto [w1, i1] = run();
          const auto [w2, i2] = run();
          expect_equal_ints(tag + " topk_idx", i1, idx.cpu_values());
          expect_close(tag + " topk_weight", w1, weight.cpu_values(), pointwise(dtype));
          expect_equal_ints(tag + " topk_idx rerun", i1, i2);
          expect_same_bits(tag + " topk_weight rerun", w1, w2);
        }
  // Groups that do not fit are refused as on the CPU.
  FloatArg logits({2, 8}, DType::f32, random_floats(16, 5)), probs({2, 8}, DType::f32, std::vector<float>(16));
  FloatArg weight({2, 3}, DType::f32, std::vector<float>(6));
  IntArg idx({2, 3}, std::vector<int32_t>(6));
  for (const RouteGroups g : {RouteGroups{3, 1}, RouteGroups{8, 2}, RouteGroups{4, 1}, RouteGroups{2, 3}})
    CHECK_THROWS_AS(cuda::moe_route_forward(gpu(), probs.gpu(), idx.gpu(), weight.gpu(),
                                            logits.gpu(), {}, false, true, g),
                    Error);
}

TEST_CASE("moe_route_forward breaks exact ties towards the lower expert", "[cuda][moe]") {
  // Every logit equal: softmax probabilities all 1/E, so the top k are 0..K-1 in
  // order; with a bias favouring expert 3 it comes first, then the rest in order.
  const int64_t N = 33, E = 8, K = 3;
  for (bool biased : {false, true}) {
    FloatArg logits({N, E}, DType::f32, std::vector<float>(N * E, 0.5f));
    std::vector<float> b(E, 0.0f);
    b[3] = 0.125f;
    FloatArg bias({E}, DType::f32, b);
    FloatArg probs({N, E}, DType::f32, std::vector<float>(N * E));
    FloatArg weight({N, K}, DType::f32, std::vector<float>(N * K));
    IntArg idx({N, K}, std::vector<int32_t>(N * K));
    cuda::moe_route_forward(gpu(), probs.gpu(), idx.gpu(), weight.gpu(), logits.gpu(),
                            biased ? bias.gpu() : Tensor{}, false, true);
    std::vector<int32_t> want;
    for (int64_t n = 0; n < N; ++n)
      for (int32_t e : biased ? std::vector<int32_t>{3, 0, 1} : std::vector<int32_t>{0, 1, 2})
        want.push_back(e);
    expect_equal_ints(biased ? "biased ties" : "ties", idx.gpu_values(), want);
    // The bias only selects: normalised weights stay 1/K.
    const auto w = weight.gpu_values();
    CHECK(std::all_of(w.begin(), w.end(), [](float x) { return std::fabs(x - 1.0f / 3) < 1e-6f; }));
  }
}

TEST_CASE("moe_plan matches the CPU op integer for integer", "[cuda][moe]") {
  struct Case {
    int64_t N, E, K;
  };
  const Case kCases[] = {{1, 4, 1},  {17, 4, 2},  {17, 8, 8},     {4097, 8, 2},
                         {4097, 64, 8}, {4097, 256, 8}, {65537, 64, 8}, {1, 64, 1}};
  for (const Case c : kCases) {
    const int64_t M = c.N * c.K;
    const int64_t balanced = std::max<int64_t>(1, M / c.E);
    // 0: keep all; half the balanced load: heavy experts drop; M: no drops, but
    // through the capacity path.
    for (int64_t capacity : {int64_t{0}, std::max<int64_t>(1, balanced / 2), M}) {
      for (int taken_mode = 0; taken_mode < 2; ++taken_mode) {
        const uint64_t seed = 7 * M + 13 * c.E + capacity + taken_mode;
        IntArg idx({c.N, c.K}, skewed_choices(M, c.E, seed));
        // What earlier token blocks took: from none up to past the capacity
        // (an expert with nothing left keeps none).
        const auto most = static_cast<int32_t>(std::max<int64_t>(1, capacity + capacity / 2));
        IntArg taken({c.E}, random_ints(c.E, seed + 1, 0, most));
        IntArg slot_src({M}, std::vector<int32_t>(M)), assign_slot({M}, std::vector<int32_t>(M));
        IntArg load({c.E}, std::vector<int32_t>(c.E)), kept({c.E}, std::vector<int32_t>(c.E));
        const bool with_taken = taken_mode == 1;
        cpu::moe_plan(cpu(), slot_src.cpu(), assign_slot.cpu(), load.cpu(), kept.cpu(), idx.cpu(),
                      capacity, with_taken ? taken.cpu() : Tensor{});
        auto run = [&] {
          for (IntArg* t : {&slot_src, &assign_slot, &load, &kept}) t->poison();
          cuda::moe_plan(gpu(), slot_src.gpu(), assign_slot.gpu(), load.gpu(), kept.gpu(),
                         idx.gpu(), capacity, with_taken ? taken.gpu() : Tensor{});
          return std::vector<std::vector<int32_t>>{slot_src.gpu_values(), assign_slot.gpu_values(),
                                                   load.gpu_values(), kept.gpu_values()};
        };
        const auto r1 = run();
        const auto r2 = run();
        const std::string tag = fmt::format("moe_plan N={} E={} K={} capacity={}{}", c.N, c.E,
                                            c.K, capacity, with_taken ? " taken" : "");
        const IntArg* refs[] = {&slot_src, &assign_slot, &load, &kept};
        const char* names[] = {" slot_src", " assign_slot", " load", " kept"};
        for (int i = 0; i < 4; ++i) {
          expect_equal_ints(tag + names[i], r1[i], refs[i]->cpu_values());
          expect_equal_ints(tag + names[i] + " rerun", r1[i], r2[i]);
        }
        // The capped cases must drop (else they test less than they say), the
        // others not.
        const auto& ld = load.cpu_values();
        const auto& kp = kept.cpu_values();
        if (capacity == 0 || (capacity == M && !with_taken)) CHECK(ld == kp);
        if (capacity > 0 && capacity < balanced && M >= 4 * c.E) CHECK(ld != kp);
      }
    }
  }
}

TEST_CASE("moe_plan with every assignment to one expert", "[cuda][moe]") {
  const int64_t N = 4097, E = 64, K = 2, M = N * K;
  IntArg idx({N, K}, std::vector<int32_t>(M, 37));
  IntArg slot_src({M}, std::vector<int32_t>(M)), assign_slot({M}, std::vector<int32_t>(M));
  IntArg load({E}, std::vector<int32_t>(E)), kept({E}, std::vector<int32_t>(E));
  cpu::moe_plan(cpu(), slot_src.cpu(), assign_slot.cpu(), load.cpu(), kept.cpu(), idx.cpu(), 1000,
                {});
  cuda::moe_plan(gpu(), slot_src.gpu(), assign_slot.gpu(), load.gpu(), kept.gpu(), idx.gpu(), 1000,
                 {});
  expect_equal_ints("one expert slot_src", slot_src.gpu_values(), slot_src.cpu_values());
  expect_equal_ints("one expert assign_slot", assign_slot.gpu_values(), assign_slot.cpu_values());
  expect_equal_ints("one expert load", load.gpu_values(), load.cpu_values());
  expect_equal_ints("one expert kept", kept.gpu_values(), kept.cpu_values());
  CHECK(kept.cpu_values()[37] == 1000);
}

TEST_CASE("moe_plan refuses an expert out of range and recovers", "[cuda][moe]") {
  const int64_t N = 17, E = 8, K = 2, M = N * K;
  for (int32_t bad : {-1, 8, 1 << 30}) {
    std::vector<int32_t> choices = skewed_choices(M, E, 99);
    choices[21] = bad;
    choices[30] = bad;
    IntArg idx({N, K}, choices);
    IntArg slot_src({M}, std::vector<int32_t>(M)), assign_slot({M}, std::vector<int32_t>(M));
    IntArg load({E}, std::vector<int32_t>(E)), kept({E}, std::vector<int32_t>(E));
    CHECK_THROWS_AS(cpu::moe_plan(cpu(), slot_src.cpu(), assign_slot.cpu(), load.cpu(),
                                  kept.cpu(), idx.cpu(), 0, {}),
                    Error);
    try {
      cuda::moe_plan(gpu(), slot_src.gpu(), assign_slot.gpu(), load.gpu(), kept.gpu(), idx.gpu(),
                     0, {});
      FAIL("moe_plan accepted expert " << bad);
    } catch (const Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find(fmt::format("expert {} out of range", bad)) != std::string::npos);
      CHECK(what.find("assignment 21") != std::string::npos);  // the first one
    }
  }
  {  // Unchecked (the engine's setting): no refusal, nothing written out of bounds
     // (the emulator's ASan build would report it), the good experts' loads counted.
    std::vector<int32_t> choices = skewed_choices(M, E, 97);
    choices[5] = E;
    IntArg idx({N, K}, choices);
    IntArg slot_src({M}, std::vector<int32_t>(M)), assign_slot({M}, std::vector<int32_t>(M));
    IntArg load({E}, std::vector<int32_t>(E)), kept({E}, std::vector<int32_t>(E));
    gpu().cuda->check_index_operands = false;
    CHECK_NOTHROW(cuda::moe_plan(gpu(), slot_src.gpu(), assign_slot.gpu(), load.gpu(), kept.gpu(),
                                 idx.gpu(), 0, {}));
    gpu().cuda->check_index_operands = true;
    const std::vector<int32_t> l = load.gpu_values();
    CHECK(std::accumulate(l.begin(), l.end(), 0) == M - 1);
  }
  // The GPU is still usable: a good plan right after.
  IntArg idx({N, K}, skewed_choices(M, E, 98));
  IntArg slot_src({M}, std::vector<int32_t>(M)), assign_slot({M}, std::vector<int32_t>(M));
  IntArg load({E}, std::vector<int32_t>(E)), kept({E}, std::vector<int32_t>(E));
  cpu::moe_plan(cpu(), slot_src.cpu(), assign_slot.cpu(), load.cpu(), kept.cpu(), idx.cpu(), 3, {});
  cuda::moe_plan(gpu(), slot_src.gpu(), assign_slot.gpu(), load.gpu(), kept.gpu(), idx.gpu(), 3,
                 {});
  expect_equal_ints("plan after a refusal", assign_slot.gpu_values(), assign_slot.cpu_values());
}

TEST_CASE("moe gather/combine and backwards match the CPU op", "[cuda][moe][combine]") {
  struct Dtypes {
    // gather: out, inp; gather backward: dinp, dout; combine: out, expert_out;
    // combine backward: dexpert_out, dout, expert_out; combine weights.
    DType xs, x, dx, dxs, y, ys, dys, dy, ys_b, w;
    const char* name;
  };
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  const Dtypes kDtypes[] = {
      {f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, "fp32"},
      {bf16, bf16, bf16, bf16, bf16, bf16, bf16, bf16, bf16, bf16, "bf16"},
      {f16, f16, f16, f16, f16, f16, f16, f16, f16, f16, "fp16"},
      {bf16, f32, f32, bf16, f32, bf16, bf16, f32, bf16, f16, "mixed"},
  };
  struct Layout {
    int64_t C, offset;
    const char* name;
  };
  // Packed (16-byte) kernels; the same shape at a base pointer off by one
  // element; a row that is no whole number of packs.
  const Layout kLayouts[] = {{64, 0, "C=64"}, {64, 1, "C=64 unaligned"}, {17, 0, "C=17"}};
  struct Routing {
    int64_t E, K;
  };
  for (const Dtypes& dt : kDtypes)
    for (const Layout& lay : kLayouts)
      for (int64_t N : kTokens)
        for (const Routing r : {Routing{4, 1}, Routing{8, 2}, Routing{64, 8}})
          for (bool capped : {false, true}) {
            if (emulated() && N > 1000 && !(r.E == 64 && capped)) continue;
            const int64_t E = r.E, K = r.K, S = N * K, C = lay.C, off = lay.offset;
            const uint64_t seed = 31 * N + 7 * E + K + (capped ? 5000 : 0) + 100 * C;
            // The plan (CPU; tested against the GPU's above), with drops when capped.
            std::vector<int32_t> src(S), slot(S), load(E), kept(E);
            auto choices = skewed_choices(S, E, seed);
            cpu::moe_plan(cpu(), host_ints(src, {S}), host_ints(slot, {S}), host_ints(load, {E}),
                          host_ints(kept, {E}), host_ints(choices, {N, K}),
                          capped ? std::max<int64_t>(1, S / E / 2) : 0, {});
            IntArg slot_src({S}, src), assign_slot({S}, slot);
            const std::string tag = fmt::format("moe {} {} N={} E={} K={}{}", dt.name, lay.name, N,
                                                E, K, capped ? " capped" : "");

            FloatArg x({N, C}, dt.x, random_floats(N * C, seed + 1), off);
            FloatArg xs({S, C}, dt.xs, std::vector<float>(S * C), off);
            FloatArg dxs({S, C}, dt.dxs, random_floats(S * C, seed + 2), off);
            FloatArg dx({N, C}, dt.dx, random_floats(N * C, seed + 3), off);  // accumulated
            FloatArg ys({S, C}, dt.ys, random_floats(S * C, seed + 4), off);
            FloatArg w({N, K}, dt.w, random_floats(N * K, seed + 5, 0.0f, 1.0f), off);
            FloatArg y({N, C}, dt.y, random_floats(N * C, seed + 6), off);  // accumulated
            FloatArg dy({N, C}, dt.dy, random_floats(N * C, seed + 7), off);
            FloatArg ys_b({S, C}, dt.ys_b, random_floats(S * C, seed + 8), off);
            FloatArg dys({S, C}, dt.dys, std::vector<float>(S * C), off);
            FloatArg dw({N, K}, dt.w, std::vector<float>(N * K), off);
            cpu::moe_gather(cpu(), xs.cpu(), x.cpu(), slot_src.cpu(), K);
            cpu::moe_gather_backward(cpu(), dx.cpu(), dxs.cpu(), assign_slot.cpu());
            cpu::moe_combine(cpu(), y.cpu(), ys.cpu(), assign_slot.cpu(), w.cpu());
            cpu::moe_combine_backward(cpu(), dys.cpu(), dw.cpu(), dy.cpu(), ys_b.cpu(),
                                      assign_slot.cpu(), slot_src.cpu(), w.cpu());
            auto run = [&] {
              xs.poison();
              dys.poison();
              dw.poison();
              dx.reset();
              y.reset();
              cuda::moe_gather(gpu(), xs.gpu(), x.gpu(), slot_src.gpu(), K);
              cuda::moe_gather_backward(gpu(), dx.gpu(), dxs.gpu(), assign_slot.gpu());
              cuda::moe_combine(gpu(), y.gpu(), ys.gpu(), assign_slot.gpu(), w.gpu());
              cuda::moe_combine_backward(gpu(), dys.gpu(), dw.gpu(), dy.gpu(), ys_b.gpu(),
                                         assign_slot.gpu(), slot_src.gpu(), w.gpu());
              return std::vector<std::vector<float>>{xs.gpu_values(), dx.gpu_values(),
                                                     y.gpu_values(), dys.gpu_values(),
                                                     dw.gpu_values()};
            };
            const auto r1 = run();
            const auto r2 = run();
            // Copies, and sums in the CPU's k order with separate multiply and
            // add roundings: the same bits as the CPU op in every dtype.
            expect_same_bits(tag + " gather", r1[0], xs.cpu_values());
            expect_same_bits(tag + " gather_backward", r1[1], dx.cpu_values());
            expect_same_bits(tag + " combine", r1[2], y.cpu_values());
            expect_same_bits(tag + " combine_backward dexpert_out", r1[3], dys.cpu_values());
            // A dot product over C in another order (both in double).
            expect_close(tag + " combine_backward dtopk_weight", r1[4], dw.cpu_values(),
                         reduction(dt.w));
            for (size_t i = 0; i < r1.size(); ++i) expect_same_bits(tag + " rerun", r1[i], r2[i]);
          }
}

TEST_CASE("CUDA MoE ops reject bad arguments with trainer::Error", "[cuda][moe]") {
  const int64_t N = 5, E = 4;
  FloatArg logits({N, E}, DType::f32, std::vector<float>(N * E));
  FloatArg probs({N, E}, DType::f32, std::vector<float>(N * E));
  FloatArg w5({N, 5}, DType::f32, std::vector<float>(N * 5));
  IntArg idx5({N, 5}, std::vector<int32_t>(N * 5));
  // top_k above the number of experts, as the CPU op refuses.
  CHECK_THROWS_AS(cuda::moe_route_forward(gpu(), probs.gpu(), idx5.gpu(), w5.gpu(), logits.gpu(),
                                          {}, false, true),
                  Error);
  // A CPU tensor, a float tensor where an index is expected, a wrong shape.
  FloatArg w2({N, 2}, DType::f32, std::vector<float>(N * 2));
  IntArg idx2({N, 2}, std::vector<int32_t>(N * 2));
  CHECK_THROWS_AS(cuda::moe_route_forward(gpu(), probs.cpu(), idx2.gpu(), w2.gpu(), logits.gpu(),
                                          {}, false, true),
                  Error);
  CHECK_THROWS_AS(cuda::moe_route_forward(gpu(), probs.gpu(), w2.gpu(), w2.gpu(), logits.gpu(),
                                          {}, false, true),
                  Error);
  FloatArg bias3({3}, DType::f32, std::vector<float>(3));
  CHECK_THROWS_AS(cuda::moe_route_forward(gpu(), probs.gpu(), idx2.gpu(), w2.gpu(), logits.gpu(),
                                          bias3.gpu(), false, true),
                  Error);
  FloatArg xs({N * 2, 8}, DType::f32, std::vector<float>(N * 2 * 8));
  FloatArg x({N, 8}, DType::f32, std::vector<float>(N * 8));
  IntArg src({N * 2}, std::vector<int32_t>(N * 2, -1));
  CHECK_THROWS_AS(cuda::moe_gather(gpu(), xs.gpu(), x.gpu(), src.gpu(), 0), Error);
  FloatArg x9({N, 9}, DType::f32, std::vector<float>(N * 9));
  CHECK_THROWS_AS(cuda::moe_gather(gpu(), xs.gpu(), x9.gpu(), src.gpu(), 2), Error);
  // More experts than the CUDA router takes.
  const int64_t big = 4097;
  FloatArg lbig({1, big}, DType::f32, std::vector<float>(big));
  FloatArg pbig({1, big}, DType::f32, std::vector<float>(big));
  FloatArg w1({1, 1}, DType::f32, std::vector<float>(1));
  IntArg i1({1, 1}, std::vector<int32_t>(1));
  CHECK_THROWS_AS(cuda::moe_route_forward(gpu(), pbig.gpu(), i1.gpu(), w1.gpu(), lbig.gpu(), {},
                                          false, true),
                  Error);
}

// More than 2^31 elements in the slot-major tensors: an int32 row offset would wrap.
// Shared capacity (kernels/moe_capacity.h): run loads from ragged runs (a
// padding run of length 0, top-k entries outside [0, E) that are not counted),
// then `taken` from gathered loads walked in a shuffled order with some runs
// this rank's; integer for integer with the CPU op, run twice on poisoned outputs.
TEST_CASE("moe_run_loads and moe_capacity_taken match the CPU op", "[cuda][moe]") {
  struct Case {
    int64_t N, K, E;
  };
  uint64_t seed = 900;
  for (const Case& c : {Case{1, 1, 4}, Case{17, 2, 8}, Case{4097, 8, 64}, Case{300, 2, 256}}) {
    std::vector<int32_t> choices = skewed_choices(c.N * c.K, c.E, seed++);
    for (size_t a = 0; a < choices.size(); a += 13) choices[a] = a % 2 ? -1 : static_cast<int32_t>(c.E + a % 5);
    // Runs: consecutive pieces of the rows in a shuffled order, then padding.
    std::vector<int32_t> runs;
    std::mt19937_64 rng(seed++);
    for (int64_t first = 0; first < c.N;) {
      const int64_t length = std::min<int64_t>(c.N - first, 1 + static_cast<int64_t>(rng() % (c.N / 3 + 1)));
      runs.insert(runs.end(), {static_cast<int32_t>(first), static_cast<int32_t>(length)});
      first += length;
    }
    for (size_t r = runs.size() / 2; r > 1; --r) {
      const size_t o = rng() % r;
      std::swap(runs[2 * (r - 1)], runs[2 * o]);
      std::swap(runs[2 * (r - 1) + 1], runs[2 * o + 1]);
    }
    runs.insert(runs.end(), {0, 0});
    const int64_t R = static_cast<int64_t>(runs.size()) / 2;
    const std::string tag = fmt::format("N={} K={} E={} runs={}", c.N, c.K, c.E, R);
    IntArg idx({c.N, c.K}, choices), table({R, 2}, runs), loads({R, c.E}, std::vector<int32_t>(R * c.E));
    cpu::moe_run_loads(cpu(), loads.cpu(), idx.cpu(), table.cpu());
    std::vector<int32_t> first_run;
    for (int rerun = 0; rerun < 2; ++rerun) {
      loads.poison();
      cuda::moe_run_loads(gpu(), loads.gpu(), idx.gpu(), table.gpu());
      const std::vector<int32_t> got = loads.gpu_values();
      expect_equal_ints(tag + " run loads", got, loads.cpu_values());
      if (rerun == 1) expect_equal_ints(tag + " run loads rerun", got, first_run);
      first_run = got;
    }
    // Three ranks' loads gathered: this rank's, then two others' (random).
    std::vector<int32_t> all = loads.cpu_values(), others = random_ints(2 * R * c.E, seed++, 0, 40);
    all.insert(all.end(), others.begin(), others.end());
    std::vector<int32_t> order;
    for (int64_t q = 0; q < 3 * R; ++q)
      if (rng() % 4 != 0) order.insert(order.end(), {static_cast<int32_t>(q), q < R ? 1 : 0});
    for (size_t q = order.size() / 2; q > 1; --q) {
      const size_t o = rng() % q;
      std::swap(order[2 * (q - 1)], order[2 * o]);
      std::swap(order[2 * (q - 1) + 1], order[2 * o + 1]);
    }
    const int64_t Q = static_cast<int64_t>(order.size()) / 2;
    IntArg all_loads({3 * R, c.E}, all), walk({Q, 2}, order);
    for (int64_t capacity : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
      IntArg taken({c.E}, std::vector<int32_t>(c.E));
      cpu::moe_capacity_taken(cpu(), taken.cpu(), all_loads.cpu(), walk.cpu(), capacity);
      for (int rerun = 0; rerun < 2; ++rerun) {
        taken.poison();
        cuda::moe_capacity_taken(gpu(), taken.gpu(), all_loads.gpu(), walk.gpu(), capacity);
        expect_equal_ints(tag + fmt::format(" taken, capacity {}", capacity), taken.gpu_values(),
                          taken.cpu_values());
      }
    }
  }
}

TEST_CASE("moe gather/combine index tensors beyond 2^31 elements", "[cuda][large]") {
  const int64_t S = (int64_t{1} << 19) + 1, C = 4096, Nsrc = 1024;  // S * C = 2^31 + 4096
  // Rows of distinct bf16 values per source row.
  std::vector<float> rows(Nsrc * C);
  for (int64_t n = 0; n < Nsrc; ++n)
    for (int64_t c = 0; c < C; ++c)
      rows[n * C + c] = static_cast<float>((n * 31 + c) % 251) - 125.0f;
  DeviceTensor inp({Nsrc, C}, DType::bf16), out({S, C}, DType::bf16);
  inp.upload(rows);
  std::vector<int32_t> src(S);
  for (int64_t s = 0; s < S; ++s)
    src[s] = s % 5 == 3 ? -1 : static_cast<int32_t>((s * 7919) % Nsrc);
  DeviceTensor slot_src({S}, DType::i32);
  slot_src.upload_ints(src);
  cuda::moe_gather(gpu(), out, inp, slot_src, 1);
  auto row_of = [&](const DeviceTensor& t, int64_t r) {
    Tensor one(static_cast<uint16_t*>(t.view().data) + r * C, {C}, DType::bf16, Device::cuda);
    std::vector<uint16_t> bits(C);
    copy_to_host(bits.data(), one);
    std::vector<float> v(C);
    for (int64_t c = 0; c < C; ++c) v[c] = bf16_to_f32(bits[c]);
    return v;
  };
  auto source_row = [&](int32_t a, float scale) {
    std::vector<float> v(C, 0.0f);
    if (a >= 0)
      for (int64_t c = 0; c < C; ++c) v[c] = scale * rows[a * C + c];
    return v;
  };
  for (int64_t s : {int64_t{0}, S / 2, S - 3, S - 2, S - 1}) {
    INFO("gather row " << s);
    CHECK(row_of(out, s) == source_row(src[s], 1.0f));
  }
  // Token n takes slot S - 1 - n (dropped when that slot is unused): dinp = 0 + row,
  // then combine with weight 1 adds the same row again.
  std::vector<int32_t> slot(S);
  for (int64_t n = 0; n < S; ++n) slot[n] = n % 7 == 2 ? -1 : static_cast<int32_t>(S - 1 - n);
  DeviceTensor assign_slot({S}, DType::i32), dinp({S, C}, DType::bf16), w({S, 1});
  assign_slot.upload_ints(slot);
  w.upload(std::vector<float>(S, 1.0f));
  cuda::fill(gpu(), dinp, 0.0f);
  cuda::moe_gather_backward(gpu(), dinp, out, assign_slot);
  auto expected = [&](int64_t n, float scale) {
    return slot[n] < 0 ? std::vector<float>(C, 0.0f) : source_row(src[slot[n]], scale);
  };
  for (int64_t n : {int64_t{0}, int64_t{1}, S / 2, S - 2, S - 1}) {
    INFO("gather_backward row " << n);
    CHECK(row_of(dinp, n) == expected(n, 1.0f));
  }
  cuda::moe_combine(gpu(), dinp, out, assign_slot, w);
  for (int64_t n : {int64_t{0}, int64_t{1}, S / 2, S - 2, S - 1}) {
    INFO("combine row " << n);
    CHECK(row_of(dinp, n) == expected(n, 2.0f));
  }
}

}  // namespace trainer::cuda_test
