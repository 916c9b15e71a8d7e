// Causal GQA attention against a double reference, finite differences, masking
// (documents, sliding windows) and strided (fused QKV) views; query blocks at
// an offset into longer keys (context parallelism's chunks).
#include "kernels/attention.h"

#include "test/kernels/kernel_test_util.h"
#include "test/common/doc_starts.h"

using namespace trainer;
using namespace trainer::test;
using trainer::testing::doc_starts;

namespace {

struct Dims {
  int64_t B, T, H, Hkv, D;       // T: queries
  int64_t Tk = 0, offset = 0;    // keys (0: T) and the first query's position among them
  // Document masking: (B, T) first key of each query's document; empty = none.
  std::vector<int32_t> doc_start = {};
  int64_t window = 0;  // sliding window: > 0 hides keys before offset + i - window + 1
  int64_t keys() const { return Tk > 0 ? Tk : T; }
  int64_t first_key(int64_t b, int64_t i) const {
    const int64_t doc = doc_start.empty() ? 0 : doc_start[b * T + i];
    return window > 0 ? std::max(doc, offset + i - window + 1) : doc;
  }
};

// out (B, T, H, D) and lse (B, H, T) in double, straight from the definition:
// query i at position offset + i sees keys [0, offset + i] of the (B, Tk) keys.
std::vector<double> ref_attention(const Dims& s, const std::vector<double>& q,
                                  const std::vector<double>& k, const std::vector<double>& v,
                                  std::vector<double>* lse = nullptr) {
  std::vector<double> out(s.B * s.T * s.H * s.D, 0.0);
  if (lse) lse->assign(s.B * s.H * s.T, 0.0);
  const double scale = 1.0 / std::sqrt(double(s.D));
  const int64_t Tk = s.keys();
  std::vector<double> p(Tk);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t g = h / (s.H / s.Hkv);
      for (int64_t i = 0; i < s.T; ++i) {
        const double* qi = &q[((b * s.T + i) * s.H + h) * s.D];
        const int64_t first = s.first_key(b, i), last = s.offset + i;
        double m = -1e300;
        for (int64_t j = first; j <= last; ++j) {
          const double* kj = &k[((b * Tk + j) * s.Hkv + g) * s.D];
          double dotp = 0.0;
          for (int64_t d = 0; d < s.D; ++d) dotp += qi[d] * kj[d];
          p[j] = dotp * scale;
          m = std::max(m, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = first; j <= last; ++j) sum += std::exp(p[j] - m);
        double* oi = &out[((b * s.T + i) * s.H + h) * s.D];
        for (int64_t j = first; j <= last; ++j) {
          const double w = std::exp(p[j] - m) / sum;
          const double* vj = &v[((b * Tk + j) * s.Hkv + g) * s.D];
          for (int64_t d = 0; d < s.D; ++d) oi[d] += w * vj[d];
        }
        if (lse) (*lse)[(b * s.H + h) * s.T + i] = m + std::log(sum);
      }
    }
  return out;
}

struct Run {
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
};

Run run_attention(const Dims& s, uint32_t seed) {
  Context ctx;
  Run r;
  const int64_t Tk = s.keys();
  const int64_t nq = s.B * s.T * s.H * s.D, nkv = s.B * Tk * s.Hkv * s.D;
  r.q = random_floats(nq, seed, -2.0f, 2.0f);
  r.k = random_floats(nkv, seed + 1, -2.0f, 2.0f);
  r.v = random_floats(nkv, seed + 2);
  r.dout = random_floats(nq, seed + 3);
  r.out.assign(nq, 9.0f);
  r.lse.assign(s.B * s.H * s.T, 9.0f);
  r.dq.assign(nq, 9.0f);  // outputs start dirty: they must be written, not accumulated
  r.dk.assign(nkv, 9.0f);
  r.dv.assign(nkv, 9.0f);
  const Tensor q = view(r.q, {s.B, s.T, s.H, s.D}), k = view(r.k, {s.B, Tk, s.Hkv, s.D}),
               v = view(r.v, {s.B, Tk, s.Hkv, s.D}), out = view(r.out, {s.B, s.T, s.H, s.D}),
               lse = view(r.lse, {s.B, s.H, s.T});
  std::vector<int32_t> docs = s.doc_start;
  const Tensor doc_start = docs.empty() ? Tensor{} : Tensor(docs.data(), {s.B, s.T}, DType::i32);
  cpu::attention_forward(ctx, out, lse, q, k, v, s.offset, doc_start, s.window);
  cpu::attention_backward(ctx, view(r.dq, {s.B, s.T, s.H, s.D}), view(r.dk, {s.B, Tk, s.Hkv, s.D}),
                          view(r.dv, {s.B, Tk, s.Hkv, s.D}), view(r.dout, {s.B, s.T, s.H, s.D}),
                          q, k, v, out, lse, s.offset, doc_start, s.window);
  return r;
}

// Backward against central differences of the double forward; `stride` > 1
// checks every stride-th coordinate only (for the larger shapes).
void check_attention(const Dims& s, int64_t stride) {
  INFO("B " << s.B << " T " << s.T << " H " << s.H << " Hkv " << s.Hkv << " D " << s.D << " Tk "
            << s.keys() << " offset " << s.offset << " window " << s.window);
  Run r = run_attention(s, 100 + static_cast<uint32_t>(s.T));
  const auto qd = to_double(r.q), kd = to_double(r.k), vd = to_double(r.v), dyd = to_double(r.dout);
  std::vector<double> lse_ref;
  require_close(r.out, ref_attention(s, qd, kd, vd, &lse_ref), 1e-5, 1e-5, "attention out");
  require_close(r.lse, lse_ref, 1e-5, 1e-5, "attention lse");

  auto sampled_fd = [&](const std::vector<float>& got, const std::vector<double>& x0, int which,
                        const char* what) {
    std::vector<double> x = x0;
    std::vector<float> got_s;
    std::vector<double> want_s;
    auto J = [&]() {
      return dot(dyd, ref_attention(s, which == 0 ? x : qd, which == 1 ? x : kd, which == 2 ? x : vd));
    };
    for (size_t i = 0; i < x.size(); i += stride) {
      const double eps = 1e-6;
      x[i] = x0[i] + eps;
      const double jp = J();
      x[i] = x0[i] - eps;
      const double jm = J();
      x[i] = x0[i];
      want_s.push_back((jp - jm) / (2 * eps));
      got_s.push_back(got[i]);
    }
    require_close(got_s, want_s, 1e-4, 1e-4, what);
  };
  sampled_fd(r.dq, qd, 0, "attention dq");
  sampled_fd(r.dk, kd, 1, "attention dk");
  sampled_fd(r.dv, vd, 2, "attention dv");
}

}  // namespace

TEST_CASE("attention matches the double reference and finite differences", "[cpu][attention]") {
  check_attention({1, 1, 1, 1, 4}, 1);   // a single token attends to itself
  check_attention({2, 5, 2, 2, 8}, 1);   // multi-head
  check_attention({1, 17, 4, 2, 4}, 1);  // GQA, ragged T
  check_attention({2, 6, 4, 1, 8}, 1);   // multi-query
}

TEST_CASE("attention of a query block at an offset into longer keys matches finite differences",
          "[cpu][attention][cp]") {
  check_attention({2, 4, 4, 2, 8, 16, 0}, 1);    // the first chunk: later keys unseen, dk 0
  check_attention({2, 4, 4, 2, 8, 16, 8}, 1);    // a middle chunk, GQA
  check_attention({1, 5, 2, 1, 4, 10, 5}, 1);    // the last chunk, multi-query
  check_attention({1, 70, 2, 2, 8, 200, 90}, 37);  // two 64-query blocks behind a long prefix
}

TEST_CASE("attention with document masking matches the double reference and finite differences",
          "[cpu][attention][docmask]") {
  // Each query sees only its own document: key ranges that start inside a
  // 64-query block, at a block's first row, at the last key, and a document
  // of one token.
  check_attention({2, 9, 2, 1, 4, 0, 0, doc_starts(2, 9, 0, {{3, 4, 8}, {}})}, 1);
  check_attention({1, 17, 4, 2, 8, 0, 0, doc_starts(1, 17, 0, {{1, 16}})}, 1);
  // A query block at an offset (context parallelism) whose documents began
  // before it, and one starting inside it.
  check_attention({2, 6, 4, 2, 8, 20, 9, doc_starts(2, 6, 9, {{5, 12}, {9, 10, 14}})}, 1);
  // Several 64-query blocks: a block whose rows span two documents, one wholly
  // inside a late document (keys before it skipped).
  check_attention({1, 150, 2, 1, 8, 0, 0, doc_starts(1, 150, 0, {{40, 64, 100, 129}})}, 29);
}

TEST_CASE("attention with document masking: every document computes as if alone",
          "[cpu][attention][docmask]") {
  // A sequence packing documents [0, 5), [5, 31), [31, 70) gives, for each,
  // the outputs and gradients of that document run by itself, bit for bit
  // up to float rounding of the shorter sums.
  Context ctx;
  const int64_t T = 70, H = 2, D = 8;
  const std::vector<int64_t> bounds = {0, 5, 31, 70};
  Dims packed{1, T, H, 1, D, 0, 0, doc_starts(1, T, 0, {{5, 31}})};
  Run whole = run_attention(packed, 5);
  for (size_t d = 0; d + 1 < bounds.size(); ++d) {
    const int64_t a = bounds[d], n = bounds[d + 1] - a;
    INFO("document " << d);
    Dims alone{1, n, H, 1, D};
    Run part;
    std::vector<float> q(whole.q.begin() + a * H * D, whole.q.begin() + (a + n) * H * D),
        k(whole.k.begin() + a * D, whole.k.begin() + (a + n) * D),
        v(whole.v.begin() + a * D, whole.v.begin() + (a + n) * D),
        dy(whole.dout.begin() + a * H * D, whole.dout.begin() + (a + n) * H * D);
    std::vector<float> out(q.size()), lse(H * n), dq(q.size()), dk(k.size()), dv(v.size());
    cpu::attention_forward(ctx, view(out, {1, n, H, D}), view(lse, {1, H, n}), view(q, {1, n, H, D}),
                           view(k, {1, n, 1, D}), view(v, {1, n, 1, D}), 0);
    cpu::attention_backward(ctx, view(dq, {1, n, H, D}), view(dk, {1, n, 1, D}), view(dv, {1, n, 1, D}),
                            view(dy, {1, n, H, D}), view(q, {1, n, H, D}), view(k, {1, n, 1, D}),
                            view(v, {1, n, 1, D}), view(out, {1, n, H, D}), view(lse, {1, H, n}), 0);
    auto part_of = [&](const std::vector<float>& x, int64_t row) {
      return to_double(std::vector<float>(x.begin() + a * row, x.begin() + (a + n) * row));
    };
    require_close(out, part_of(whole.out, H * D), 1e-6, 1e-6, "out");
    require_close(dq, part_of(whole.dq, H * D), 1e-6, 1e-6, "dq");
    require_close(dk, part_of(whole.dk, D), 1e-6, 1e-6, "dk");
    require_close(dv, part_of(whole.dv, D), 1e-6, 1e-6, "dv");
  }
}

TEST_CASE("attention with a sliding window matches the double reference and finite differences",
          "[cpu][attention][window]") {
  // A window of 1 (each query sees itself), 3 over 9 queries, one spanning a
  // 64-query block boundary (the block's keys start at its first row's
  // window), one wider than the sequence (plain causal).
  check_attention({2, 9, 2, 1, 4, 0, 0, {}, 3}, 1);
  check_attention({1, 17, 4, 2, 8, 0, 0, {}, 1}, 1);
  check_attention({1, 150, 2, 1, 8, 0, 0, {}, 70}, 29);
  check_attention({2, 5, 2, 2, 8, 0, 0, {}, 200}, 1);
  // A context-parallel chunk: its queries' windows are at their global
  // positions, reaching back past the chunk's start.
  check_attention({2, 6, 4, 2, 8, 20, 9, {}, 4}, 1);
  // With documents: a query's first key is the later of the two.
  check_attention({2, 9, 2, 1, 4, 0, 0, doc_starts(2, 9, 0, {{3, 4, 8}, {}}), 3}, 1);
}

TEST_CASE("a sliding window equals the same first keys given as document starts",
          "[cpu][attention][window]") {
  // The window is one more lower bound on each query's first key: passing
  // max(doc_start, offset + i - window + 1) as doc_start gives the same bits.
  Dims windowed{2, 70, 4, 2, 8, 100, 30, doc_starts(2, 70, 30, {{10, 50, 90}, {45}}), 9};
  Dims explicit_starts = windowed;
  explicit_starts.window = 0;
  for (int64_t b = 0; b < windowed.B; ++b)
    for (int64_t i = 0; i < windowed.T; ++i)
      explicit_starts.doc_start[b * windowed.T + i] = static_cast<int32_t>(windowed.first_key(b, i));
  const Run a = run_attention(windowed, 3), b = run_attention(explicit_starts, 3);
  CHECK(a.out == b.out);
  CHECK(a.lse == b.lse);
  CHECK(a.dq == b.dq);
  CHECK(a.dk == b.dk);
  CHECK(a.dv == b.dv);
  // And the window changes the result.
  Dims unwindowed = windowed;
  unwindowed.window = 0;
  CHECK(run_attention(unwindowed, 3).out != a.out);
}

TEST_CASE("attention refuses a negative window", "[cpu][attention][window]") {
  Context ctx;
  std::vector<float> q(1 * 4 * 2 * 4), out(q.size()), lse(1 * 2 * 4);
  const Tensor t = view(q, {1, 4, 2, 4});
  CHECK_THROWS_WITH(cpu::attention_forward(ctx, view(out, {1, 4, 2, 4}), view(lse, {1, 2, 4}), t, t,
                                           t, 0, Tensor{}, -1),
                    Catch::Contains("window must be >= 0"));
}

TEST_CASE("attention refuses a document start outside a query's keys", "[cpu][attention][docmask]") {
  Context ctx;
  std::vector<float> q(1 * 4 * 2 * 4), kv(1 * 6 * 2 * 4), out(q.size()), lse(1 * 2 * 4);
  const Tensor k = view(kv, {1, 6, 2, 4});
  std::vector<int32_t> ok = {0, 0, 4, 4}, late = {0, 0, 5, 4}, negative = {-1, 0, 0, 0};
  auto run = [&](std::vector<int32_t>& d) {
    cpu::attention_forward(ctx, view(out, {1, 4, 2, 4}), view(lse, {1, 2, 4}), view(q, {1, 4, 2, 4}),
                           k, k, 2, Tensor(d.data(), {1, 4}, DType::i32));
  };
  CHECK_NOTHROW(run(ok));
  CHECK_THROWS_WITH(run(late), Catch::Contains("doc_start[0][2] = 5 is outside [0, 4]"));
  CHECK_THROWS_AS(run(negative), Error);
}

TEST_CASE("attention across several 64-query blocks", "[cpu][attention]") {
  check_attention({1, 131, 4, 2, 8}, 97);  // three blocks, the last one ragged
  check_attention({1, 256, 2, 1, 64}, 1601);  // the benchmark model's head dim and length
}

TEST_CASE("attention is causal: a change at token t leaves earlier outputs bitwise equal",
          "[cpu][attention]") {
  Context ctx;
  const Dims s{2, 80, 4, 2, 8};
  Run a = run_attention(s, 7);
  const int64_t t0 = 50;
  Run b = a;
  for (int64_t bb = 0; bb < s.B; ++bb) {
    for (int64_t d = 0; d < s.Hkv * s.D; ++d) {
      b.k[(bb * s.T + t0) * s.Hkv * s.D + d] += 1.0f;
      b.v[(bb * s.T + t0) * s.Hkv * s.D + d] -= 1.0f;
    }
    for (int64_t d = 0; d < s.H * s.D; ++d) b.q[(bb * s.T + t0) * s.H * s.D + d] *= 2.0f;
  }
  cpu::attention_forward(ctx, view(b.out, {s.B, s.T, s.H, s.D}), view(b.lse, {s.B, s.H, s.T}),
                         view(b.q, {s.B, s.T, s.H, s.D}), view(b.k, {s.B, s.T, s.Hkv, s.D}),
                         view(b.v, {s.B, s.T, s.Hkv, s.D}), 0);
  bool later_changed = false;
  for (int64_t bb = 0; bb < s.B; ++bb)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t d = 0; d < s.H * s.D; ++d) {
        const int64_t i = (bb * s.T + t) * s.H * s.D + d;
        if (t < t0) REQUIRE(a.out[i] == b.out[i]);
        else if (a.out[i] != b.out[i]) later_changed = true;
      }
  CHECK(later_changed);
}

TEST_CASE("attention reads q, k, v as strided views of a fused QKV buffer", "[cpu][attention]") {
  Context ctx;
  const Dims s{2, 9, 4, 2, 8};
  Run r = run_attention(s, 31);
  const int64_t row = (s.H + 2 * s.Hkv) * s.D;  // (B, T, [q heads | k heads | v heads], D)
  std::vector<float> qkv(s.B * s.T * row), dqkv(s.B * s.T * row, 9.0f);
  for (int64_t n = 0; n < s.B * s.T; ++n) {
    std::copy_n(&r.q[n * s.H * s.D], s.H * s.D, &qkv[n * row]);
    std::copy_n(&r.k[n * s.Hkv * s.D], s.Hkv * s.D, &qkv[n * row + s.H * s.D]);
    std::copy_n(&r.v[n * s.Hkv * s.D], s.Hkv * s.D, &qkv[n * row + (s.H + s.Hkv) * s.D]);
  }
  auto strided = [&](std::vector<float>& buf, int64_t offset, int64_t heads) {
    Tensor t(buf.data() + offset, {s.B, s.T, heads, s.D});
    t.stride[1] = row;
    t.stride[0] = s.T * row;
    return t;
  };
  std::vector<float> out(r.out.size()), lse(r.lse.size());
  const Tensor q = strided(qkv, 0, s.H), k = strided(qkv, s.H * s.D, s.Hkv),
               v = strided(qkv, (s.H + s.Hkv) * s.D, s.Hkv);
  cpu::attention_forward(ctx, view(out, {s.B, s.T, s.H, s.D}), view(lse, {s.B, s.H, s.T}), q, k, v,
                         0);
  require_close(out, to_double(r.out), 1e-6, 1e-6, "strided out");
  cpu::attention_backward(ctx, strided(dqkv, 0, s.H), strided(dqkv, s.H * s.D, s.Hkv),
                          strided(dqkv, (s.H + s.Hkv) * s.D, s.Hkv), view(r.dout, {s.B, s.T, s.H, s.D}),
                          q, k, v, view(out, {s.B, s.T, s.H, s.D}), view(lse, {s.B, s.H, s.T}),
                          0);
  std::vector<float> dq, dk, dv;
  for (int64_t n = 0; n < s.B * s.T; ++n) {
    dq.insert(dq.end(), &dqkv[n * row], &dqkv[n * row + s.H * s.D]);
    dk.insert(dk.end(), &dqkv[n * row + s.H * s.D], &dqkv[n * row + (s.H + s.Hkv) * s.D]);
    dv.insert(dv.end(), &dqkv[n * row + (s.H + s.Hkv) * s.D], &dqkv[(n + 1) * row]);
  }
  require_close(dq, to_double(r.dq), 1e-5, 1e-6, "strided dq");
  require_close(dk, to_double(r.dk), 1e-5, 1e-6, "strided dk");
  require_close(dv, to_double(r.dv), 1e-5, 1e-6, "strided dv");
}

TEST_CASE("attention refuses heads that do not group", "[cpu][attention]") {
  Context ctx;
  std::vector<float> q(1 * 2 * 3 * 4), kv(1 * 2 * 2 * 4), out(q.size()), lse(1 * 3 * 2);
  CHECK_THROWS_AS(cpu::attention_forward(ctx, view(out, {1, 2, 3, 4}), view(lse, {1, 3, 2}),
                                         view(q, {1, 2, 3, 4}), view(kv, {1, 2, 2, 4}),
                                         view(kv, {1, 2, 2, 4}), 0), Error);
}

TEST_CASE("attention refuses queries past the end of the keys", "[cpu][attention][cp]") {
  Context ctx;
  std::vector<float> q(1 * 4 * 2 * 4), kv(1 * 6 * 2 * 4), out(q.size()), lse(1 * 2 * 4);
  const Tensor k = view(kv, {1, 6, 2, 4});
  CHECK_NOTHROW(cpu::attention_forward(ctx, view(out, {1, 4, 2, 4}), view(lse, {1, 2, 4}),
                                       view(q, {1, 4, 2, 4}), k, k, 2));
  CHECK_THROWS_AS(cpu::attention_forward(ctx, view(out, {1, 4, 2, 4}), view(lse, {1, 2, 4}),
                                         view(q, {1, 4, 2, 4}), k, k, 3), Error);
}
