// [cuda][attention] causal GQA attention forward/backward against the CPU op on
// the same dtypes (fp32, bf16, fp16; lse fp32): ragged lengths, grouped KV heads
// (whose 16-bit dk, dv the GPU accumulates in fp32 and rounds once, as the CPU
// does), q/k/v as strided views of one fused buffer, and query blocks at an
// offset into a longer key sequence (context parallelism's chunks), and document
// masking (doc_start: several documents per row, boundaries inside and on the
// 64-row tiles, a strided view, out-of-range values refused). 16-bit cases run
// twice: on the fused kernels (flash_attention.h, where the shape allows) and on
// the unfused path (CudaState::flash_attention off).
#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "test/common/doc_starts.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {
namespace {

struct AttnCase {
  int64_t B, T, H, Hkv, D;  // T: queries
  bool fused;  // q, k, v are views into one (B, Tk, H + 2 Hkv, D) buffer
  int64_t Tk = 0, q_offset = 0;  // keys (0: T) and the first query's position among them
  // Document masking: (B, T) first key of each query (empty: none), given to
  // the GPU as a view whose rows are doc_pad elements longer.
  std::vector<int32_t> doc_start = {};
  int64_t doc_pad = 0;
  int64_t window = 0;  // sliding window (0: none)
  int64_t keys() const { return Tk > 0 ? Tk : T; }
};

// A (B, len, heads, D) view at head offset h0 of a (B, Tk, Htot, D) buffer
// (queries: its first T positions, whatever their offset among the keys).
Tensor heads_view(void* base, Device device, const AttnCase& c, int64_t heads, int64_t h0,
                  int64_t Htot, DType dtype, int64_t len) {
  Tensor t(static_cast<char*>(base) + h0 * c.D * dtype_size(dtype), {c.B, len, heads, c.D}, dtype,
           device);
  t.stride = {c.keys() * Htot * c.D, Htot * c.D, c.D, 1};
  return t;
}

void run_attention(const AttnCase& c, DType dtype, bool flash) {
  const int64_t Htot = c.H + 2 * c.Hkv, Tk = c.keys();
  const int64_t nq = c.B * c.T * c.H * c.D, nkv = c.B * Tk * c.Hkv * c.D;
  const auto qkv = round_to(random_floats(c.B * Tk * Htot * c.D, 200 + c.T, -2.0f, 2.0f), dtype);
  const auto dy = round_to(random_floats(nq, 201 + c.T), dtype);

  // CPU reference on the fused layout (it accepts strided heads).
  std::vector<unsigned char> hqkv = encode(qkv, dtype);
  HostTensor hy({c.B, c.T, c.H, c.D}, std::vector<float>(nq), dtype),
      hlse({c.B, c.H, c.T}, std::vector<float>(c.B * c.H * c.T));
  HostTensor hdy({c.B, c.T, c.H, c.D}, dy, dtype),
      hdq({c.B, c.T, c.H, c.D}, std::vector<float>(nq), dtype),
      hdk({c.B, Tk, c.Hkv, c.D}, std::vector<float>(nkv), dtype),
      hdv({c.B, Tk, c.Hkv, c.D}, std::vector<float>(nkv), dtype);
  const Tensor hq = heads_view(hqkv.data(), Device::cpu, c, c.H, 0, Htot, dtype, c.T);
  const Tensor hk = heads_view(hqkv.data(), Device::cpu, c, c.Hkv, c.H, Htot, dtype, Tk);
  const Tensor hv = heads_view(hqkv.data(), Device::cpu, c, c.Hkv, c.H + c.Hkv, Htot, dtype, Tk);
  std::vector<int32_t> hdocs = c.doc_start;
  const Tensor hdoc = hdocs.empty() ? Tensor{} : host_ints(hdocs, {c.B, c.T});
  cpu::attention_forward(cpu(), hy, hlse, hq, hk, hv, c.q_offset, hdoc, c.window);
  cpu::attention_backward(cpu(), hdq, hdk, hdv, hdy, hq, hk, hv, hy, hlse, c.q_offset, hdoc,
                          c.window);

  DeviceTensor gqkv({c.B, Tk, Htot, c.D}, dtype);
  gqkv.upload(qkv);
  // The unfused case copies each head group into its own contiguous tensor.
  DeviceTensor cq({c.B, c.T, c.H, c.D}, dtype), ck({c.B, Tk, c.Hkv, c.D}, dtype),
      cv({c.B, Tk, c.Hkv, c.D}, dtype);
  if (!c.fused) {
    std::vector<float> q(nq), k(nkv), v(nkv);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t t = 0; t < Tk; ++t)
        for (int64_t h = 0; h < Htot; ++h)
          for (int64_t d = 0; d < c.D; ++d) {
            const float x = qkv[(((b * Tk + t) * Htot) + h) * c.D + d];
            if (h < c.H) {
              if (t < c.T) q[((b * c.T + t) * c.H + h) * c.D + d] = x;
            } else if (h < c.H + c.Hkv) {
              k[((b * Tk + t) * c.Hkv + h - c.H) * c.D + d] = x;
            } else {
              v[((b * Tk + t) * c.Hkv + h - c.H - c.Hkv) * c.D + d] = x;
            }
          }
    cq.upload(q);
    ck.upload(k);
    cv.upload(v);
  }
  void* fused = gqkv.view().data;
  const Tensor gq =
      c.fused ? heads_view(fused, Device::cuda, c, c.H, 0, Htot, dtype, c.T) : cq.view();
  const Tensor gk =
      c.fused ? heads_view(fused, Device::cuda, c, c.Hkv, c.H, Htot, dtype, Tk) : ck.view();
  const Tensor gv =
      c.fused ? heads_view(fused, Device::cuda, c, c.Hkv, c.H + c.Hkv, Htot, dtype, Tk) : cv.view();
  DeviceTensor gy({c.B, c.T, c.H, c.D}, dtype), glse({c.B, c.H, c.T}),
      gdy({c.B, c.T, c.H, c.D}, dtype), gdq({c.B, c.T, c.H, c.D}, dtype),
      gdk({c.B, Tk, c.Hkv, c.D}, dtype), gdv({c.B, Tk, c.Hkv, c.D}, dtype);
  gdy.upload(dy);
  // The padding holds values no query may take: reading it would be refused.
  const int64_t doc_ld = c.T + c.doc_pad;
  DeviceTensor gdocs({c.B, c.doc_start.empty() ? 0 : doc_ld}, DType::i32);
  Tensor gdoc;
  if (!c.doc_start.empty()) {
    std::vector<int32_t> padded(c.B * doc_ld, static_cast<int32_t>(Tk + 1));
    for (int64_t b = 0; b < c.B; ++b)
      std::copy_n(c.doc_start.begin() + b * c.T, c.T, padded.begin() + b * doc_ld);
    gdocs.upload_ints(padded);
    gdoc = gdocs.view();
    gdoc.shape[1] = c.T;
  }
  auto run = [&] {
    gpu().cuda->flash_attention = flash;
    for (DeviceTensor* t : {&gy, &glse, &gdq, &gdk, &gdv}) t->poison();
    cuda::attention_forward(gpu(), gy, glse, gq, gk, gv, c.q_offset, gdoc, c.window);
    cuda::attention_backward(gpu(), gdq, gdk, gdv, gdy, gq, gk, gv, gy, glse, c.q_offset, gdoc,
                             c.window);
    std::vector<std::vector<float>> r;
    for (DeviceTensor* t : {&gy, &glse, &gdq, &gdk, &gdv}) r.push_back(t->download());
    gpu().cuda->flash_attention = true;
    return r;
  };
  const auto r1 = run();
  const auto r2 = run();
  const std::string tag =
      fmt::format("attention {} B={} T={} H={} Hkv={} D={} fused={} Tk={} q_offset={} flash={}{} "
                  "window={}", dtype_name(dtype), c.B, c.T, c.H, c.Hkv, c.D, c.fused, Tk,
                  c.q_offset, flash, c.doc_start.empty() ? "" : " docs", c.window);
  // 16-bit: P and dS are rounded to the dtype before their GEMMs (the CPU keeps
  // them fp32), and dS = P (dP - D) cancels, so the gradients get a looser bound
  // than the output. fp16 rounds 8x finer than bf16 (2^-11 vs 2^-8): its bounds
  // are the bf16 ones over 4, which keeps a 2x margin on that ratio.
  const Tolerance out_tol = narrow_tolerance(dtype, kF32Reduction, true);
  const Tolerance grad_tol = dtype == DType::bf16  ? Tolerance{5e-2, 5e-2, 1e-2}
                             : dtype == DType::f16 ? Tolerance{1.25e-2, 1.25e-2, 2.5e-3}
                                                   : kF32LongSum;
  const HostTensor* refs[] = {&hy, &hlse, &hdq, &hdk, &hdv};
  const char* names[] = {" out", " lse", " dq", " dk", " dv"};
  for (int i = 0; i < 5; ++i) {
    expect_close(tag + names[i], r1[i], refs[i]->values(), i >= 2 ? grad_tol : out_tol);
    expect_same_bits(tag + names[i] + " rerun", r1[i], r2[i]);
  }
}

}  // namespace

const AttnCase kCases[] = {{1, 1, 1, 1, 1, false},  {2, 17, 4, 2, 16, false},
                           {2, 17, 4, 2, 16, true},  {1, 130, 6, 1, 64, true},
                           {3, 64, 2, 2, 24, false}, {1, 4097, 1, 1, 16, false},
                           {2, 300, 4, 2, 128, true}};
// Context-parallel query chunks: the first chunk (offset 0, keys past it unseen),
// a middle and the last chunk of a longer sequence, GQA, strided and contiguous.
const AttnCase kOffsetCases[] = {{2, 8, 4, 2, 16, false, 32, 0},
                                 {2, 8, 4, 2, 16, true, 32, 12},
                                 {1, 70, 6, 1, 64, true, 280, 210},
                                 {3, 5, 2, 2, 24, false, 23, 9}};

TEST_CASE("attention forward/backward match the CPU op", "[cuda][attention]") {
  for (const AttnCase& c : kCases) run_attention(c, DType::f32, false);
}

TEST_CASE("attention of a query block at an offset matches the CPU op", "[cuda][attention][cp]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const AttnCase& c : kOffsetCases)
      for (bool flash : {true, false}) {
        if (flash && dtype == DType::f32) continue;  // the fused kernels are 16-bit only
        run_attention(c, dtype, flash);
      }
}

TEST_CASE("attention bf16 matches the CPU op", "[cuda][attention][bf16]") {
  for (const AttnCase& c : kCases)
    for (bool flash : {true, false}) run_attention(c, DType::bf16, flash);
}

TEST_CASE("attention fp16 matches the CPU op", "[cuda][attention][fp16]") {
  for (const AttnCase& c : kCases)
    for (bool flash : {true, false}) {
      // The 4097-row fused case walks the same 65 x 65 tiles as bf16's, only
      // the element type differs (every smaller case covers that): 29 s of
      // this entry's 49 on the emulator, so there bf16 alone runs it.
      if (emulated() && flash && c.T > 1024) continue;
      run_attention(c, DType::f16, flash);
    }
}

namespace {

using testing::doc_starts;

// Any legal value per query, in no order: the kernels may not assume document
// starts grow along a row.
std::vector<int32_t> random_doc_starts(int64_t B, int64_t T, int64_t offset, uint64_t seed) {
  std::vector<int32_t> out = random_ints(B * T, seed, 0, 1 << 30);
  for (int64_t i = 0; i < B * T; ++i) out[i] %= static_cast<int32_t>(offset + i % T + 1);
  return out;
}

std::vector<AttnCase> doc_cases() {
  // 150 queries in three 64-row tiles: boundaries inside a tile, on one (64),
  // a last tile whose rows all start past key tile 0 (skipped), a one-token
  // document, a document at the last query; GQA, the fused layout, a strided
  // doc_start.
  AttnCase self{2, 150, 4, 2, 32, true};
  self.doc_start = doc_starts(2, 150, 0, {{40, 64, 100, 129}, {1, 130, 149}});
  self.doc_pad = 5;
  // A context-parallel chunk late in its sequence: documents that began
  // before it (one in a key tile the chunk's tiles skip), one starting inside.
  AttnCase chunk{2, 70, 6, 1, 64, true, 280, 210};
  chunk.doc_start = doc_starts(2, 70, 210, {{5, 200, 230}, {100, 257}});
  chunk.doc_pad = 70;  // the (B, 2 chunks) buffer a cp rank holds
  // Head dim 24: the unfused path only.
  AttnCase odd{3, 17, 2, 2, 24, false, 23, 4};
  odd.doc_start = doc_starts(3, 17, 4, {{2, 9}, {}, {20}});
  AttnCase scattered{1, 130, 2, 1, 16, false};
  scattered.doc_start = random_doc_starts(1, 130, 0, 77);
  return {self, chunk, odd, scattered};
}

}  // namespace

TEST_CASE("attention with document masking matches the CPU op", "[cuda][attention][docmask]") {
  for (const AttnCase& c : doc_cases())
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      for (bool flash : {true, false}) {
        if (flash && dtype == DType::f32) continue;
        run_attention(c, dtype, flash);
      }
}

// Sliding windows: narrower than a 64-row tile over three tiles (key tiles
// before each query tile's window skipped), spanning tiles at a
// context-parallel chunk's offset, with documents, and on the unfused path
// (head dim 24) with a window of 2.
TEST_CASE("attention with a sliding window matches the CPU op", "[cuda][attention][window]") {
  AttnCase self{2, 150, 4, 2, 32, true};
  self.window = 40;
  AttnCase chunk{2, 70, 6, 1, 64, true, 280, 210};
  chunk.window = 100;
  AttnCase docs{2, 150, 4, 2, 32, true};
  docs.doc_start = doc_starts(2, 150, 0, {{40, 64, 100, 129}, {1, 130, 149}});
  docs.window = 50;
  AttnCase odd{3, 17, 2, 2, 24, false, 23, 4};
  odd.window = 2;
  for (const AttnCase& c : {self, chunk, docs, odd})
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      for (bool flash : {true, false}) {
        if (flash && dtype == DType::f32) continue;
        run_attention(c, dtype, flash);
      }
}

TEST_CASE("attention refuses a document start outside a query's keys",
          "[cuda][attention][docmask]") {
  // 4 queries at offset 2 into 6 keys: query 2 sees keys [0, 4]. 16-bit D 16
  // takes the fused kernels, fp32 the unfused path; both refuse, forward and
  // backward, before writing anything.
  for (DType dtype : {DType::f32, DType::bf16}) {
    DeviceTensor q({1, 4, 2, 16}, dtype), kv({1, 6, 2, 16}, dtype), out({1, 4, 2, 16}, dtype),
        lse({1, 2, 4}), dout({1, 4, 2, 16}, dtype), dq({1, 4, 2, 16}, dtype),
        dk({1, 6, 2, 16}, dtype), dv({1, 6, 2, 16}, dtype), docs({1, 4}, DType::i32);
    for (DeviceTensor* t : {&q, &kv, &dout}) t->upload(std::vector<float>(t->numel(), 0.5f));
    auto forward = [&] { cuda::attention_forward(gpu(), out, lse, q, kv, kv, 2, docs); };
    auto backward = [&] {
      cuda::attention_backward(gpu(), dq, dk, dv, dout, q, kv, kv, out, lse, 2, docs);
    };
    docs.upload_ints({0, 0, 4, 4});
    CHECK_NOTHROW(forward());
    CHECK_NOTHROW(backward());
    docs.upload_ints({0, 0, 5, 4});
    out.poison();
    CHECK_THROWS_WITH(forward(), Catch::Contains("doc_start[0][2] = 5 is outside [0, 4]"));
    CHECK_THROWS_WITH(backward(), Catch::Contains("doc_start[0][2] = 5 is outside [0, 4]"));
    CHECK(std::isnan(out.download()[0]));
    docs.upload_ints({0, -1, 0, -7});
    CHECK_THROWS_WITH(forward(), Catch::Contains("doc_start[0][1] = -1 is outside [0, 3]"));
  }
}

}  // namespace trainer::cuda_test
