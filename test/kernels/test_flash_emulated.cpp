// The fused attention's tile programs (kernels/cuda/flash_attention_tiles.h, the
// code the GPU runs) on the CPU warp emulator, against the CPU attention op on
// the same 16-bit-rounded inputs: bf16 and fp16, ragged lengths, grouped KV
// heads, head dims 16..128, a query block at an offset into a longer key
// sequence (context parallelism's case), and document masking. Outputs start as
// NaN, so an element no block writes fails.
#include "kernels/attention.h"
#include "test/common/doc_starts.h"
#include "test/kernels/flash_emulator.h"
#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;
using trainer::testing::doc_starts;

namespace {

struct Case {
  int64_t B, T, H, Hkv, D;
};

template <class E>
std::vector<E> encode(const std::vector<float>& v) {
  std::vector<E> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = flash::from_f32<E>(v[i]);
  return out;
}
template <class E>
std::vector<float> decode(const std::vector<E>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = flash::to_f32(v[i]);
  return out;
}
template <class E>
std::vector<float> rounded(const std::vector<float>& v) {
  return decode(encode<E>(v));
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

// The CPU op in fp32 on (B, T) queries and keys.
Result cpu_attention(const Case& c, std::vector<float> q, std::vector<float> k,
                     std::vector<float> v, std::vector<float> dout) {
  Context ctx;
  const int64_t nq = c.B * c.T * c.H * c.D, nkv = c.B * c.T * c.Hkv * c.D;
  Result r{std::vector<float>(nq), std::vector<float>(c.B * c.H * c.T), std::vector<float>(nq),
           std::vector<float>(nkv), std::vector<float>(nkv)};
  const auto qs = {c.B, c.T, c.H, c.D}, kvs = {c.B, c.T, c.Hkv, c.D};
  cpu::attention_forward(ctx, view(r.out, qs), view(r.lse, {c.B, c.H, c.T}), view(q, qs),
                         view(k, kvs), view(v, kvs), 0);
  cpu::attention_backward(ctx, view(r.dq, qs), view(r.dk, kvs), view(r.dv, kvs), view(dout, qs),
                          view(q, qs), view(k, kvs), view(v, kvs), view(r.out, qs),
                          view(r.lse, {c.B, c.H, c.T}), 0);
  return r;
}

// The tile programs on Tq queries at q_offset against c.T keys (doc_start:
// (B, Tq) first keys, or null).
template <class E>
Result flash_attention(const Case& c, int64_t Tq, int64_t q_offset, const std::vector<float>& q,
                       const std::vector<float>& k, const std::vector<float>& v,
                       const std::vector<float>& dout,
                       const std::vector<int32_t>* doc_start = nullptr, int64_t window = 0) {
  const float nan = std::nanf("");
  std::vector<E> eq = encode<E>(q), ek = encode<E>(k), ev = encode<E>(v), edo = encode<E>(dout);
  std::vector<E> out = encode<E>(std::vector<float>(q.size(), nan)), dq = out;
  std::vector<E> dk = encode<E>(std::vector<float>(k.size(), nan)), dv = dk;
  std::vector<float> lse(c.B * c.H * Tq, nan), delta(c.B * c.H * Tq, nan);
  auto heads = [&](void* data, int64_t T, int64_t H) {
    return flash::Heads{data, T * H * c.D, H * c.D, c.D};
  };
  flash::Problem p;
  p.q = heads(eq.data(), Tq, c.H), p.out = heads(out.data(), Tq, c.H);
  p.dout = heads(edo.data(), Tq, c.H), p.dq = heads(dq.data(), Tq, c.H);
  p.k = heads(ek.data(), c.T, c.Hkv), p.v = heads(ev.data(), c.T, c.Hkv);
  p.dk = heads(dk.data(), c.T, c.Hkv), p.dv = heads(dv.data(), c.T, c.Hkv);
  p.lse = lse.data(), p.delta = delta.data(), p.lse_bh = Tq, p.q_offset = q_offset;
  p.B = int(c.B), p.H = int(c.H), p.Hkv = int(c.Hkv), p.Tq = int(Tq), p.Tk = int(c.T);
  p.D = int(c.D), p.scale = 1.0f / std::sqrt(float(c.D));
  if (doc_start) p.doc_start = doc_start->data(), p.doc_sb = Tq;
  p.window = window;
  flash::emulated_forward<E>(p);
  flash::emulated_backward<E>(p);
  return {decode(out), lse, decode(dq), decode(dk), decode(dv)};
}

struct Bounds {
  double atol, rtol, rel_l2;
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, Bounds b,
                  const std::string& what) {
  require_close(got, to_double(want), b.rtol, b.atol, what);
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  INFO(what << ": relative L2 " << std::sqrt(num / std::max(den, 1e-30)));
  CHECK(std::sqrt(num / std::max(den, 1e-30)) <= b.rel_l2);
}

// 16-bit P and dS feed the tile products (the CPU keeps them fp32), and the
// outputs are rounded once: the [cuda] suite's bounds for the unfused path.
template <class E>
std::pair<Bounds, Bounds> bounds() {
  if constexpr (std::is_same_v<E, flash::EmuBf16>) return {{2e-2, 2e-2, 1e-2}, {5e-2, 5e-2, 1e-2}};
  return {{5e-3, 5e-3, 2.5e-3}, {1.25e-2, 1.25e-2, 2.5e-3}};
}

template <class E>
void check_self_attention(const Case& c, const char* dtype) {
  const int64_t nq = c.B * c.T * c.H * c.D, nkv = c.B * c.T * c.Hkv * c.D;
  const uint32_t seed = uint32_t(c.T * 7 + c.D);
  const auto q = rounded<E>(random_floats(nq, seed, -2.0f, 2.0f));
  const auto k = rounded<E>(random_floats(nkv, seed + 1, -2.0f, 2.0f));
  const auto v = rounded<E>(random_floats(nkv, seed + 2, -2.0f, 2.0f));
  const auto dout = rounded<E>(random_floats(nq, seed + 3));
  const Result want = cpu_attention(c, q, k, v, dout);
  const Result got = flash_attention<E>(c, c.T, 0, q, k, v, dout);
  const auto [out_b, grad_b] = bounds<E>();
  const std::string tag = std::string(dtype) + " B=" + std::to_string(c.B) +
                          " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
                          " Hkv=" + std::to_string(c.Hkv) + " D=" + std::to_string(c.D);
  expect_close(got.out, want.out, out_b, tag + " out");
  expect_close(got.lse, want.lse, {1e-5, 1e-5, 1e-6}, tag + " lse");
  expect_close(got.dq, want.dq, grad_b, tag + " dq");
  expect_close(got.dk, want.dk, grad_b, tag + " dk");
  expect_close(got.dv, want.dv, grad_b, tag + " dv");
}

const Case kCases[] = {{1, 1, 1, 1, 16},  {2, 17, 4, 2, 16}, {1, 130, 2, 1, 64},
                       {1, 65, 1, 1, 128}, {2, 64, 2, 2, 32}};

}  // namespace

TEST_CASE("fused attention tiles (emulated) match the CPU op in bf16", "[cpu][attention][flash]") {
  for (const Case& c : kCases) check_self_attention<flash::EmuBf16>(c, "bf16");
}

TEST_CASE("fused attention tiles (emulated) match the CPU op in fp16", "[cpu][attention][flash]") {
  for (const Case& c : kCases) check_self_attention<flash::EmuF16>(c, "fp16");
}

// Queries T0.. of a T-token sequence against all T keys equal the full op's
// last rows; with dout zero on the first T0 rows, the full op's dK and dV are
// exactly what those queries contribute.
TEST_CASE("fused attention tiles (emulated) take a query block at an offset",
          "[cpu][attention][flash]") {
  using E = flash::EmuBf16;
  const Case c{2, 100, 2, 1, 32};
  const int64_t T0 = 63, Tq = c.T - T0, row = c.H * c.D;
  const int64_t nq = c.B * c.T * row, nkv = c.B * c.T * c.Hkv * c.D;
  const auto q = rounded<E>(random_floats(nq, 5, -2.0f, 2.0f));
  const auto k = rounded<E>(random_floats(nkv, 6, -2.0f, 2.0f));
  const auto v = rounded<E>(random_floats(nkv, 7, -2.0f, 2.0f));
  auto dout = rounded<E>(random_floats(nq, 8));
  auto tail = [&](const std::vector<float>& x, int64_t width) {  // rows T0.. of (B, T, width)
    std::vector<float> t;
    for (int64_t b = 0; b < c.B; ++b)
      t.insert(t.end(), x.begin() + (b * c.T + T0) * width, x.begin() + (b + 1) * c.T * width);
    return t;
  };
  for (int64_t b = 0; b < c.B; ++b)
    std::fill(dout.begin() + b * c.T * row, dout.begin() + (b * c.T + T0) * row, 0.0f);
  const Result want = cpu_attention(c, q, k, v, dout);
  const Result got = flash_attention<E>(c, Tq, T0, tail(q, row), k, v, tail(dout, row));
  const auto [out_b, grad_b] = bounds<E>();
  expect_close(got.out, tail(want.out, row), out_b, "offset out");
  std::vector<float> lse_tail;  // (B, H, T) rows T0..
  for (int64_t bh = 0; bh < c.B * c.H; ++bh)
    lse_tail.insert(lse_tail.end(), want.lse.begin() + bh * c.T + T0,
                    want.lse.begin() + (bh + 1) * c.T);
  expect_close(got.lse, lse_tail, {1e-5, 1e-5, 1e-6}, "offset lse");
  expect_close(got.dq, tail(want.dq, row), grad_b, "offset dq");
  expect_close(got.dk, want.dk, grad_b, "offset dk");
  expect_close(got.dv, want.dv, grad_b, "offset dv");
}

// Context parallelism's early chunk: queries T0 .. T0 + Tq - 1 of a T-token
// sequence against all T keys, so key tiles lie wholly past the last query
// (their dK, dV must be written as zeros: the layer sums two chunks' dK, dV).
// The full op with dout zero outside the block gives the block's rows and,
// exactly, its dK and dV (rows with dout zero contribute nothing).
TEST_CASE("fused attention tiles (emulated) take a query block before the last keys",
          "[cpu][attention][flash]") {
  using E = flash::EmuF16;
  const Case c{2, 200, 4, 2, 16};
  const int64_t T0 = 40, Tq = 50, row = c.H * c.D;
  const int64_t nq = c.B * c.T * row, nkv = c.B * c.T * c.Hkv * c.D;
  const auto q = rounded<E>(random_floats(nq, 15, -2.0f, 2.0f));
  const auto k = rounded<E>(random_floats(nkv, 16, -2.0f, 2.0f));
  const auto v = rounded<E>(random_floats(nkv, 17, -2.0f, 2.0f));
  auto dout = rounded<E>(random_floats(nq, 18));
  auto block = [&](const std::vector<float>& x, int64_t width) {  // rows T0 .. T0 + Tq of (B, T, width)
    std::vector<float> t;
    for (int64_t b = 0; b < c.B; ++b)
      t.insert(t.end(), x.begin() + (b * c.T + T0) * width, x.begin() + (b * c.T + T0 + Tq) * width);
    return t;
  };
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t t = 0; t < c.T; ++t)
      if (t < T0 || t >= T0 + Tq)
        std::fill(dout.begin() + (b * c.T + t) * row, dout.begin() + (b * c.T + t + 1) * row, 0.0f);
  const Result want = cpu_attention(c, q, k, v, dout);
  const Result got = flash_attention<E>(c, Tq, T0, block(q, row), k, v, block(dout, row));
  const auto [out_b, grad_b] = bounds<E>();
  expect_close(got.out, block(want.out, row), out_b, "early block out");
  std::vector<float> lse_block;  // (B, H, T) rows T0 .. T0 + Tq
  for (int64_t bh = 0; bh < c.B * c.H; ++bh)
    lse_block.insert(lse_block.end(), want.lse.begin() + bh * c.T + T0,
                     want.lse.begin() + bh * c.T + T0 + Tq);
  expect_close(got.lse, lse_block, {1e-5, 1e-5, 1e-6}, "early block lse");
  expect_close(got.dq, block(want.dq, row), grad_b, "early block dq");
  expect_close(got.dk, want.dk, grad_b, "early block dk");
  expect_close(got.dv, want.dv, grad_b, "early block dv");
  for (int64_t b = 0; b < c.B; ++b)  // keys no query of the block sees: exact zeros
    for (int64_t i = (b * c.T + T0 + Tq) * c.Hkv * c.D; i < (b + 1) * c.T * c.Hkv * c.D; ++i) {
      REQUIRE(got.dk[i] == 0.0f);
      REQUIRE(got.dv[i] == 0.0f);
    }
}

namespace {

// The tiles against the CPU op, both on Tq queries at q_offset into c.T keys
// with the same document starts (none when `starts` is empty) and window.
template <class E>
void check_documents(const Case& c, int64_t Tq, int64_t q_offset,
                     const std::vector<std::vector<int32_t>>& starts, const std::string& tag,
                     int64_t window = 0) {
  const int64_t nq = c.B * Tq * c.H * c.D, nkv = c.B * c.T * c.Hkv * c.D;
  auto q = rounded<E>(random_floats(nq, 25, -2.0f, 2.0f));
  auto k = rounded<E>(random_floats(nkv, 26, -2.0f, 2.0f));
  auto v = rounded<E>(random_floats(nkv, 27, -2.0f, 2.0f));
  auto dout = rounded<E>(random_floats(nq, 28));
  std::vector<int32_t> docs = starts.empty() ? std::vector<int32_t>{} : doc_starts(c.B, Tq, q_offset, starts);
  Context ctx;
  Result want{std::vector<float>(nq), std::vector<float>(c.B * c.H * Tq), std::vector<float>(nq),
              std::vector<float>(nkv), std::vector<float>(nkv)};
  const auto qs = {c.B, Tq, c.H, c.D}, kvs = {c.B, c.T, c.Hkv, c.D}, ls = {c.B, c.H, Tq};
  const Tensor d = docs.empty() ? Tensor{} : Tensor(docs.data(), {c.B, Tq}, DType::i32);
  cpu::attention_forward(ctx, view(want.out, qs), view(want.lse, ls), view(q, qs), view(k, kvs),
                         view(v, kvs), q_offset, d, window);
  cpu::attention_backward(ctx, view(want.dq, qs), view(want.dk, kvs), view(want.dv, kvs),
                          view(dout, qs), view(q, qs), view(k, kvs), view(v, kvs),
                          view(want.out, qs), view(want.lse, ls), q_offset, d, window);
  const Result got =
      flash_attention<E>(c, Tq, q_offset, q, k, v, dout, docs.empty() ? nullptr : &docs, window);
  const auto [out_b, grad_b] = bounds<E>();
  expect_close(got.out, want.out, out_b, tag + " out");
  expect_close(got.lse, want.lse, {1e-5, 1e-5, 1e-6}, tag + " lse");
  expect_close(got.dq, want.dq, grad_b, tag + " dq");
  expect_close(got.dk, want.dk, grad_b, tag + " dk");
  expect_close(got.dv, want.dv, grad_b, tag + " dv");
}

}  // namespace

// Boundaries inside a 64-row tile and on one, a last query tile whose rows all
// start past key tile 0 (skipped forward, and skipped by that key tile's dK/dV
// pass), one-token documents; then a context-parallel block whose documents
// began before it.
TEST_CASE("fused attention tiles (emulated) mask documents", "[cpu][attention][flash][docmask]") {
  check_documents<flash::EmuBf16>({2, 150, 2, 1, 16}, 150, 0, {{40, 64, 100, 129}, {1, 130, 149}},
                                  "bf16 self");
  check_documents<flash::EmuF16>({2, 200, 2, 2, 32}, 130, 70, {{30, 64, 128, 150, 199}, {139}},
                                 "fp16 block");
}

// Sliding windows: narrower than a tile (whole key tiles before each query
// tile's window are skipped, forward and by the dK/dV pass), of two keys (one
// would make dq and dk exact zeros, leaving no relative error to bound),
// spanning tile boundaries at a context-parallel offset, and with documents.
TEST_CASE("fused attention tiles (emulated) mask a sliding window", "[cpu][attention][flash][window]") {
  check_documents<flash::EmuBf16>({2, 200, 2, 1, 16}, 200, 0, {}, "bf16 window 40", 40);
  check_documents<flash::EmuF16>({1, 70, 2, 2, 32}, 70, 0, {}, "fp16 window 2", 2);
  check_documents<flash::EmuBf16>({1, 260, 4, 2, 16}, 130, 130, {}, "bf16 block window 70", 70);
  check_documents<flash::EmuF16>({2, 150, 2, 1, 16}, 150, 0, {{40, 64, 100, 129}, {1, 130, 149}},
                                 "fp16 window 50 with documents", 50);
}
