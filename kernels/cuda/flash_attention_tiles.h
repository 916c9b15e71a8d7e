// FlashAttention-2-style causal grouped-query attention, as tile programs written
// once for two executors: the CUDA kernels in flash_attention.cu (WMMA on tensor
// cores, 16-bit operands, fp32 accumulation) and the warp emulator in
// test/kernels/, which runs the same code thread by thread on the CPU so the
// tiling, masking, online softmax and gradient arithmetic are tested in CI
// without a GPU.
//
// One block of kThreads threads owns one 64-row tile; warp w owns rows
// [16w, 16w + 16) of every tile product and the softmax of those rows (lane pair
// 2r', 2r'+1 shares row 16w + r', 32 columns each). Cross-warp data (K/V tiles,
// P^T and dS^T in the dK/dV pass) is fenced by sync_block, a warp's own rows by
// sync_warp. Backward is two passes, so every output element is written by one
// block and no float atomics are needed (bit-identical reruns): dK/dV per key
// tile over all query tiles and the KV head's query heads (rounded once, as the
// CPU op rounds once), then dQ per query tile.
//
// Query row i (of Tq) sits at global position q_offset + i and sees keys
// [0, q_offset + i] of Tk; q_offset is 0 with Tk = Tq for plain self-attention.
// Under document masking row i of batch b sees keys from doc_start[b][i] on
// instead: a query tile starts at the key tile holding its rows' least
// document start (the tiles before it are all masked), the rest is masked per
// element, and the dK/dV pass skips query tiles whose every row starts later
// than its keys. Document starts need not grow along a row, so no upper bound
// on the query tiles is taken from them. A sliding window (window > 0) is one
// more lower bound on each row's first key, q_offset + i - window + 1, taken
// the same way: key tiles wholly before a query tile's window are not visited.
//
// The includer defines in namespace trainer::flash, before including: FA_FN (the
// qualifier of device code), FA_HD (of what the launcher also sizes on the host), namespace wm (the nvcuda::wmma API subset used below),
// sync_block(), sync_warp(), to_f32(T), from_f32<T>(float), copy16(dst, src)
// and the constant kNegInf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/op_scratch.h"

namespace trainer::flash {

constexpr int kTile = kFlashTile;  // query rows and key columns per tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMinHeadDim = kFlashMinHeadDim, kMaxHeadDim = kFlashMaxHeadDim;  // multiples of 16 (WMMA's k)
constexpr int kVec = 8;                            // 16-bit elements per 16-byte copy

// A (B, T, heads, D) tensor: element strides, head dim contiguous.
struct Heads {
  void* data = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
};

struct Problem {
  Heads q, k, v, out, dout, dq, dk, dv;
  float* lse = nullptr;    // (B, H, Tq): row (b, h) starts at (b * H + h) * lse_bh
  float* delta = nullptr;  // (B, H, Tq) contiguous: rowsum(dout * out), backward only
  int64_t lse_bh = 0;
  int64_t q_offset = 0;
  const int32_t* doc_start = nullptr;  // (B, Tq), batch stride doc_sb; null: no documents
  int64_t doc_sb = 0;
  int64_t window = 0;  // > 0: row i sees no key before q_offset + i - window + 1
  int B = 0, H = 0, Hkv = 0, Tq = 0, Tk = 0, D = 0;
  float scale = 0.0f;
};

struct Thread {
  int tid, bx, by;  // threadIdx.x, blockIdx.x, blockIdx.y
};

FA_HD int tiles(int64_t n) { return static_cast<int>((n + kTile - 1) / kTile); }
// Rows of the tile starting at t0 of n (the last tile may be short).
FA_FN int tile_len(int64_t n, int64_t t0) {
  return n - t0 < kTile ? static_cast<int>(n - t0) : kTile;
}

// Shared memory carved into 128-byte aligned parts; with a null base it only
// counts bytes (the launcher's dynamic shared memory size).
class Carver {
 public:
  FA_HD explicit Carver(unsigned char* base) : base_(base) {}
  template <class E>
  FA_HD E* take(int64_t n) {
    E* p = reinterpret_cast<E*>(base_ + used_);
    used_ += (static_cast<size_t>(n) * sizeof(E) + 127) / 128 * 128;
    return base_ ? p : nullptr;
  }
  FA_HD size_t bytes() const { return used_; }

 private:
  unsigned char* base_;
  size_t used_ = 0;
};

template <class T>
struct ForwardSmem {
  T *q, *k, *v, *p;
  float *s, *o, *m, *l, *red_max, *red_sum;
  FA_HD ForwardSmem(unsigned char* base, int D) : c_(base) {
    q = c_.take<T>(kTile * D), k = c_.take<T>(kTile * D), v = c_.take<T>(kTile * D);
    p = c_.take<T>(kTile * kTile);
    s = c_.take<float>(kTile * kTile), o = c_.take<float>(kTile * D);
    m = c_.take<float>(kTile), l = c_.take<float>(kTile);
    red_max = c_.take<float>(2 * kTile), red_sum = c_.take<float>(2 * kTile);
  }
  FA_HD size_t bytes() const { return c_.bytes(); }

 private:
  Carver c_;
};

template <class T>
struct BackwardKvSmem {
  T *k, *v, *q, *dout, *p, *ds;
  float *s, *dp, *dk, *dv, *lse, *delta;
  FA_HD BackwardKvSmem(unsigned char* base, int D) : c_(base) {
    k = c_.take<T>(kTile * D), v = c_.take<T>(kTile * D);
    q = c_.take<T>(kTile * D), dout = c_.take<T>(kTile * D);
    p = c_.take<T>(kTile * kTile), ds = c_.take<T>(kTile * kTile);
    s = c_.take<float>(kTile * kTile), dp = c_.take<float>(kTile * kTile);
    dk = c_.take<float>(kTile * D), dv = c_.take<float>(kTile * D);
    lse = c_.take<float>(kTile), delta = c_.take<float>(kTile);
  }
  FA_HD size_t bytes() const { return c_.bytes(); }

 private:
  Carver c_;
};

template <class T>
struct BackwardQSmem {
  T *q, *dout, *k, *v, *ds;
  float *s, *dp, *dq, *lse, *delta;
  FA_HD BackwardQSmem(unsigned char* base, int D) : c_(base) {
    q = c_.take<T>(kTile * D), dout = c_.take<T>(kTile * D);
    k = c_.take<T>(kTile * D), v = c_.take<T>(kTile * D);
    ds = c_.take<T>(kTile * kTile);
    s = c_.take<float>(kTile * kTile), dp = c_.take<float>(kTile * kTile);
    dq = c_.take<float>(kTile * D);
    lse = c_.take<float>(kTile), delta = c_.take<float>(kTile);
  }
  FA_HD size_t bytes() const { return c_.bytes(); }

 private:
  Carver c_;
};

template <class T>
using FragA = wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major>;
template <class T>
using FragAT = wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::col_major>;
template <class T>
using FragB = wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major>;
template <class T>
using FragBT = wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major>;
using FragC = wm::fragment<wm::accumulator, 16, 16, 16, float>;

// Rows [t0, t0 + rows) of head h of batch b into a (kTile, D) tile; rows past
// `rows` are zero so their products are zero.
template <class T>
FA_FN void load_tile(T* dst, const Heads& src, int b, int64_t t0, int rows, int h, int D,
                     const Thread& th) {
  const int chunks = D / kVec;
  const T* base = static_cast<const T*>(src.data) + b * src.sb + h * src.sh;
  for (int c = th.tid; c < kTile * chunks; c += kThreads) {
    const int r = c / chunks, col = c % chunks * kVec;
    T* d = dst + r * D + col;
    if (r < rows) {
      copy16(d, base + (t0 + r) * src.st + col);
    } else {
      for (int i = 0; i < kVec; ++i) d[i] = from_f32<T>(0.0f);
    }
  }
}

FA_FN void fill(float* a, int n, float value, const Thread& th) {
  for (int i = th.tid; i < n; i += kThreads) a[i] = value;
}

// s rows [16w, 16w + 16) (kTile x kTile, fp32) = a rows (kTile x D) @ b^T, b a
// row-major (kTile x D) tile read as its col-major transpose.
template <class T>
FA_FN void rows_times_transpose(float* s, const T* a, const T* b, int D, int w) {
  for (int n = 0; n < kTile; n += 16) {
    FragC acc;
    wm::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < D; kk += 16) {
      FragA<T> fa;
      FragBT<T> fb;
      wm::load_matrix_sync(fa, a + 16 * w * D + kk, D);
      wm::load_matrix_sync(fb, b + n * D + kk, D);
      wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync(s + 16 * w * kTile + n, acc, kTile, wm::mem_row_major);
  }
}

// c rows [16w, 16w + 16) (kTile x D, fp32) += A @ b with b a row-major (kTile x D)
// tile and A the (kTile x kTile) tile a, or its transpose (kTransposeA: c's rows
// are a's columns, as in dV = P^T dO).
template <bool kTransposeA, class T>
FA_FN void accumulate_rows(float* c, const T* a, const T* b, int D, int w) {
  using A = std::conditional_t<kTransposeA, FragAT<T>, FragA<T>>;
  for (int n = 0; n < D; n += 16) {
    FragC acc;
    wm::load_matrix_sync(acc, c + 16 * w * D + n, D, wm::mem_row_major);
    for (int kk = 0; kk < kTile; kk += 16) {
      A fa;
      FragB<T> fb;
      wm::load_matrix_sync(fa, kTransposeA ? a + kk * kTile + 16 * w : a + 16 * w * kTile + kk,
                           kTile);
      wm::load_matrix_sync(fb, b + kk * D + n, D);
      wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync(c + 16 * w * D + n, acc, D, wm::mem_row_major);
  }
}

// The first key row i of batch b sees: its document's start, or its
// window's when that is later.
FA_FN int64_t row_first_key(const Problem& P, int b, int64_t i) {
  const int64_t doc = P.doc_start ? P.doc_start[b * P.doc_sb + i] : 0;
  const int64_t win = P.window > 0 ? P.q_offset + i - P.window + 1 : 0;
  return doc > win ? doc : win;
}

// Where this thread works inside a tile: its row, its half of the columns, and
// whether the row exists.
struct RowSlot {
  int w, r, half;
  bool ok;
  int64_t pos;    // global position of the row's query
  int64_t first;  // the first key it sees (row_first_key)
  FA_FN RowSlot(const Thread& th, const Problem& P, int b, int64_t q0, int rows)
      : w(th.tid / 32), r(16 * (th.tid / 32) + th.tid % 32 / 2), half(th.tid % 2),
        ok(r < rows), pos(P.q_offset + q0 + r),
        first(ok ? row_first_key(P, b, q0 + r) : 0) {}
  FA_FN int c0() const { return half * (kTile / 2); }
  FA_FN bool sees(int64_t key, int Tk) const {
    return ok && key < Tk && key >= first && key <= pos;
  }
};

// Keys a query tile's last row can see; the tile runs over that many keys.
FA_FN int64_t visible_keys(const Problem& P, int64_t q0, int rows) {
  const int64_t n = P.q_offset + q0 + rows;
  return n < P.Tk ? n : P.Tk;
}

// The least first key of a query tile's rows: no row sees a key before it.
// Every thread reads the same values, so the loops bounded by it stay uniform.
FA_FN int64_t first_key(const Problem& P, int b, int64_t q0, int rows) {
  if (!P.doc_start && P.window <= 0) return 0;
  int64_t m = row_first_key(P, b, q0);
  for (int r = 1; r < rows; ++r) {
    const int64_t f = row_first_key(P, b, q0 + r);
    m = f < m ? f : m;
  }
  return m;
}

template <class T>
FA_FN T* head_row(const Heads& t, int b, int64_t pos, int h) {
  return static_cast<T*>(t.data) + b * t.sb + pos * t.st + h * t.sh;
}

// out (rows of query tile) = softmax(q k^T * scale, causal) v; lse = m + log(l).
template <class T>
FA_FN void forward_tile(const Problem& P, unsigned char* smem, const Thread& th) {
  const int D = P.D, b = th.bx / P.H, h = th.bx % P.H, g = h / (P.H / P.Hkv);
  const int qt = tiles(P.Tq) - 1 - th.by;  // the longest rows start first
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;
  const int rows = tile_len(P.Tq, q0);
  ForwardSmem<T> sm(smem, D);
  load_tile(sm.q, P.q, b, q0, rows, h, D, th);
  fill(sm.o, kTile * D, 0.0f, th);
  fill(sm.m, kTile, kNegInf, th);
  fill(sm.l, kTile, 0.0f, th);
  const RowSlot row(th, P, b, q0, rows);
  const int n_kt = tiles(visible_keys(P, q0, rows));
  sync_block();
  for (int kt = static_cast<int>(first_key(P, b, q0, rows) / kTile); kt < n_kt; ++kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    const int krows = tile_len(P.Tk, k0);
    load_tile(sm.k, P.k, b, k0, krows, g, D, th);
    load_tile(sm.v, P.v, b, k0, krows, g, D, th);
    sync_block();
    rows_times_transpose(sm.s, sm.q, sm.k, D, row.w);
    sync_warp();
    float* srow = sm.s + row.r * kTile;
    float mx = kNegInf;
    for (int c = row.c0(); c < row.c0() + kTile / 2; ++c) {
      srow[c] = row.sees(k0 + c, P.Tk) ? srow[c] * P.scale : kNegInf;
      mx = srow[c] > mx ? srow[c] : mx;
    }
    sm.red_max[2 * row.r + row.half] = mx;
    sync_warp();
    const float m_old = sm.m[row.r];
    float m_new = sm.red_max[2 * row.r] > sm.red_max[2 * row.r + 1] ? sm.red_max[2 * row.r]
                                                                      : sm.red_max[2 * row.r + 1];
    m_new = m_old > m_new ? m_old : m_new;
    // Rows that have seen no key yet (past Tq, or their document starts in a
    // later tile) keep alpha 1 and p 0.
    const bool any = m_new != kNegInf;
    const float alpha = any ? expf(m_old - m_new) : 1.0f;
    float sum = 0.0f;
    T* prow = sm.p + row.r * kTile;
    for (int c = row.c0(); c < row.c0() + kTile / 2; ++c) {
      const float p = any ? expf(srow[c] - m_new) : 0.0f;
      sum += p;  // the fp32 probabilities normalise, as on the CPU
      prow[c] = from_f32<T>(p);
    }
    sm.red_sum[2 * row.r + row.half] = sum;
    float* orow = sm.o + row.r * D;
    for (int d = row.half * (D / 2); d < (row.half + 1) * (D / 2); ++d) orow[d] *= alpha;
    sync_warp();
    if (row.half == 0) {
      sm.l[row.r] = sm.l[row.r] * alpha + sm.red_sum[2 * row.r] + sm.red_sum[2 * row.r + 1];
      sm.m[row.r] = m_new;
    }
    sync_warp();
    accumulate_rows<false>(sm.o, sm.p, sm.v, D, row.w);
    sync_block();
  }
  if (row.ok) {
    const float inv = 1.0f / sm.l[row.r];
    T* out = head_row<T>(P.out, b, q0 + row.r, h);
    for (int d = row.half * (D / 2); d < (row.half + 1) * (D / 2); ++d)
      out[d] = from_f32<T>(sm.o[row.r * D + d] * inv);
    if (row.half == 0)
      P.lse[(static_cast<int64_t>(b) * P.H + h) * P.lse_bh + q0 + row.r] =
          sm.m[row.r] + logf(sm.l[row.r]);
  }
}

// delta[b, h, t] = sum_d dout * out, one thread per (b, h, t) row.
template <class T>
FA_FN void delta_rows(const Problem& P, const Thread& th) {
  const int64_t i = static_cast<int64_t>(th.bx) * kThreads + th.tid;
  if (i >= static_cast<int64_t>(P.B) * P.H * P.Tq) return;
  const int64_t t = i % P.Tq, bh = i / P.Tq;
  const int b = static_cast<int>(bh / P.H), h = static_cast<int>(bh % P.H);
  const T* dy = head_row<T>(P.dout, b, t, h);
  const T* y = head_row<T>(P.out, b, t, h);
  float dot = 0.0f;
  for (int d = 0; d < P.D; ++d) dot += to_f32(dy[d]) * to_f32(y[d]);
  P.delta[i] = dot;
}

// The query-side tile state of both backward passes: q and dout rows, their
// lse and delta.
template <class T>
FA_FN void load_query_side(const Problem& P, T* q, T* dout, float* lse, float* delta, int b,
                           int h, int64_t q0, int rows, const Thread& th) {
  load_tile(q, P.q, b, q0, rows, h, P.D, th);
  load_tile(dout, P.dout, b, q0, rows, h, P.D, th);
  const int64_t bh = static_cast<int64_t>(b) * P.H + h;
  for (int i = th.tid; i < kTile; i += kThreads) {
    lse[i] = i < rows ? P.lse[bh * P.lse_bh + q0 + i] : 0.0f;
    delta[i] = i < rows ? P.delta[bh * P.Tq + q0 + i] : 0.0f;
  }
}

// For this warp's rows: P = exp(S * scale - lse) on the visible keys (0 elsewhere)
// and dS = P (dP - delta) * scale, rounded to T (p_out may be null).
template <class T>
FA_FN void softmax_grad_rows(const Problem& P, const RowSlot& row, int64_t k0, const float* s,
                             const float* dp, const float* lse, const float* delta, T* p_out,
                             T* ds_out) {
  for (int c = row.c0(); c < row.c0() + kTile / 2; ++c) {
    const int i = row.r * kTile + c;
    const float p = row.sees(k0 + c, P.Tk) ? expf(s[i] * P.scale - lse[row.r]) : 0.0f;
    if (p_out) p_out[i] = from_f32<T>(p);
    ds_out[i] = from_f32<T>(p * (dp[i] - delta[row.r]) * P.scale);
  }
}

// dK, dV of one key tile of KV head g: every query head of the group, every
// query tile that can see the keys.
template <class T>
FA_FN void backward_kv_tile(const Problem& P, unsigned char* smem, const Thread& th) {
  const int D = P.D, group = P.H / P.Hkv, b = th.bx / P.Hkv, g = th.bx % P.Hkv;
  const int64_t k0 = static_cast<int64_t>(th.by) * kTile;
  const int krows = tile_len(P.Tk, k0);
  BackwardKvSmem<T> sm(smem, D);
  load_tile(sm.k, P.k, b, k0, krows, g, D, th);
  load_tile(sm.v, P.v, b, k0, krows, g, D, th);
  fill(sm.dk, kTile * D, 0.0f, th);
  fill(sm.dv, kTile * D, 0.0f, th);
  // The first query tile whose last row reaches k0.
  const int64_t first = k0 - P.q_offset - (kTile - 1);
  const int qt0 = first > 0 ? static_cast<int>(first / kTile) : 0;
  for (int hh = 0; hh < group; ++hh) {
    const int h = g * group + hh;
    for (int qt = qt0; qt < tiles(P.Tq); ++qt) {
      const int64_t q0 = static_cast<int64_t>(qt) * kTile;
      const int rows = tile_len(P.Tq, q0);
      // Every row's first key is past these keys: P and dS are 0 here.
      if (first_key(P, b, q0, rows) >= k0 + krows) continue;
      const RowSlot row(th, P, b, q0, rows);
      sync_block();  // the previous tile's readers of q, dout, p, ds are done
      load_query_side(P, sm.q, sm.dout, sm.lse, sm.delta, b, h, q0, rows, th);
      sync_block();
      rows_times_transpose(sm.s, sm.q, sm.k, D, row.w);
      rows_times_transpose(sm.dp, sm.dout, sm.v, D, row.w);
      sync_warp();
      softmax_grad_rows(P, row, k0, sm.s, sm.dp, sm.lse, sm.delta, sm.p, sm.ds);
      sync_block();  // dV and dK read every warp's rows of P and dS
      accumulate_rows<true>(sm.dv, sm.p, sm.dout, D, row.w);
      accumulate_rows<true>(sm.dk, sm.ds, sm.q, D, row.w);
    }
  }
  sync_block();
  for (int i = th.tid; i < krows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    head_row<T>(P.dk, b, k0 + r, g)[d] = from_f32<T>(sm.dk[i]);
    head_row<T>(P.dv, b, k0 + r, g)[d] = from_f32<T>(sm.dv[i]);
  }
}

// dQ of one query tile: dS of every key tile it sees, times K.
template <class T>
FA_FN void backward_q_tile(const Problem& P, unsigned char* smem, const Thread& th) {
  const int D = P.D, b = th.bx / P.H, h = th.bx % P.H, g = h / (P.H / P.Hkv);
  const int qt = tiles(P.Tq) - 1 - th.by;
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;
  const int rows = tile_len(P.Tq, q0);
  BackwardQSmem<T> sm(smem, D);
  load_query_side(P, sm.q, sm.dout, sm.lse, sm.delta, b, h, q0, rows, th);
  fill(sm.dq, kTile * D, 0.0f, th);
  const RowSlot row(th, P, b, q0, rows);
  const int n_kt = tiles(visible_keys(P, q0, rows));
  for (int kt = static_cast<int>(first_key(P, b, q0, rows) / kTile); kt < n_kt; ++kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    const int krows = tile_len(P.Tk, k0);
    sync_block();  // the previous tile's readers of k, v are done
    load_tile(sm.k, P.k, b, k0, krows, g, D, th);
    load_tile(sm.v, P.v, b, k0, krows, g, D, th);
    sync_block();
    rows_times_transpose(sm.s, sm.q, sm.k, D, row.w);
    rows_times_transpose(sm.dp, sm.dout, sm.v, D, row.w);
    sync_warp();
    softmax_grad_rows<T>(P, row, k0, sm.s, sm.dp, sm.lse, sm.delta, nullptr, sm.ds);
    sync_warp();
    accumulate_rows<false>(sm.dq, sm.ds, sm.k, D, row.w);
  }
  sync_block();
  if (row.ok) {
    T* dq = head_row<T>(P.dq, b, q0 + row.r, h);
    for (int d = row.half * (D / 2); d < (row.half + 1) * (D / 2); ++d)
      dq[d] = from_f32<T>(sm.dq[row.r * D + d]);
  }
}

}  // namespace trainer::flash
