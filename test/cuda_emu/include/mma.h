// nvcuda::wmma on the host, for the emulator. A real fragment is spread over
// the warp's lanes in an opaque layout; code may only load, multiply, fill and
// store it warp-wide. Here each lane holds the whole 16x16 tile (loads read
// all of it, so a lane loading before its warp's stores are fenced sees the
// stale or NaN values a GPU may see), and a store writes only the elements the
// lane owns (element i by lane i % 32), so reading a stored tile before a
// __syncwarp / __syncthreads finds other lanes' parts unwritten. Products
// accumulate in fp32, k in order.
//
// Every lane multiplying its own whole tile would be 32x the work of the real
// instruction, so each warp keeps a ring of its recent products, keyed by the
// block and by how many products the lane has issued: the first lane of the
// warp to reach its n-th product computes it, the others take the result only
// if their operands are byte-for-byte the ones it used (a lane with different
// operands, which means a race, computes its own). Of the accumulator only the
// lane's own elements are compared: an accumulator is observable only through
// stores of those, and a GPU lane likewise only ever loads back what it stored.
#pragma once

#include <cstring>
#include <type_traits>
#include <vector>

#include "../../common/wmma_rules.h"  // relative: some emulated programs see only include/

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has only the m16n16k16 shape");
  static constexpr int num_elements = 256;
  T v[16][16];
};

// The tile's 16 lines in memory (rows if row-major, else columns), each copied
// whole: one AddressSanitizer range check per line instead of one per element,
// which matters as every lane loads every tile.
template <class T>
void load_tile(T (&v)[16][16], const T* p, unsigned ldm, bool rows) {
  for (int i = 0; i < 16; ++i) {
    if (rows) {
      std::memcpy(v[i], p + i * ldm, sizeof v[i]);
      continue;
    }
    T line[16];
    std::memcpy(line, p + i * ldm, sizeof line);
    for (int j = 0; j < 16; ++j) v[j][i] = line[j];
  }
}

template <class T>
void check_tile_address(const char* op, const T* p, unsigned ldm) {
  trainer::testing::check_tile_address("wmma emulator", op, p, ldm);
}

template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load needs a layout");
  check_tile_address("load_matrix_sync", p, ldm);
  load_tile(f.v, p, ldm, std::is_same_v<L, row_major>);
}

template <class T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm,
                      layout_t layout) {
  check_tile_address("load_matrix_sync", p, ldm);
  load_tile(f.v, p, ldm, layout == mem_row_major);
}

template <class T>
void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm,
                       layout_t layout) {
  check_tile_address("store_matrix_sync", p, ldm);
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int i = lane; i < 256; i += 32) {
    const int r = i / 16, c = i % 16;
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.v[r][c];
  }
}

template <class Use, class T, class L>
void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, T x) {
  for (auto& row : f.v)
    for (T& e : row) e = x;
}

template <class TA, class LA, class LB>
struct MmaMemo {
  uint64_t block = ~uint64_t{0}, index = ~uint64_t{0};
  fragment<matrix_a, 16, 16, 16, TA, LA> a;
  fragment<matrix_b, 16, 16, 16, TA, LB> b;
  fragment<accumulator, 16, 16, 16, float> c, d;
};

template <class TA, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TA, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  constexpr size_t kRing = 64;
  static thread_local std::vector<MmaMemo<TA, LA, LB>> memo;
  const unsigned warp = (threadIdx.x + threadIdx.y * blockDim.x +
                         threadIdx.z * blockDim.x * blockDim.y) / 32;
  if (memo.size() < (warp + 1) * kRing) memo.resize((warp + 1) * kRing);
  const uint64_t block = cuda_emu::block_serial(), index = cuda_emu::next_product_index();
  MmaMemo<TA, LA, LB>& m = memo[warp * kRing + index % kRing];
  if (m.block == block && m.index == index && std::memcmp(&m.a, &a, sizeof a) == 0 &&
      std::memcmp(&m.b, &b, sizeof b) == 0) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    bool same = true;
    for (int i = lane; i < 256 && same; i += 32)
      same = std::memcmp(&m.c.v[i / 16][i % 16], &c.v[i / 16][i % 16], sizeof(float)) == 0;
    if (same) {
      d = m.d;
      return;
    }
  }
  // Each operand converted once, not once per product: the same floats, so the
  // same sums, at an eighth of the conversions.
  float fa[16][16], fb[16][16], out[16][16];
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) {
      fa[r][k] = static_cast<float>(a.v[r][k]);
      fb[r][k] = static_cast<float>(b.v[r][k]);
    }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.v[r][n];
      for (int k = 0; k < 16; ++k) s += fa[r][k] * fb[k][n];
      out[r][n] = s;
    }
  if (m.block != block || m.index != index) {
    m.block = block, m.index = index;
    m.a = a, m.b = b, m.c = c;
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 16; ++n) m.d.v[r][n] = out[r][n];
  }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) d.v[r][n] = out[r][n];
}

}  // namespace nvcuda::wmma
