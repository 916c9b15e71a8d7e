// A CPU executor for kernels/cuda/flash_attention_tiles.h, so the fused
// attention's tile programs run in CI without a GPU. Each block's kThreads
// threads are real std::threads meeting at a std::barrier (sync_block) and one
// barrier per warp (sync_warp). A WMMA fragment is the whole 16x16 tile in every
// lane: each lane loads and multiplies its own copy and lane 0 stores, which is
// all the tile code may assume of real fragments (their lane layout is opaque).
// Shared memory starts as 0xFF bytes (NaN), so a read before a write shows.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "../common/wmma_rules.h"

#include "kernels/numeric.h"

namespace trainer::flash {

#define FA_FN inline
#define FA_HD inline
constexpr float kNegInf = -INFINITY;

// Distinct 16-bit storage types, as __nv_bfloat16 and __half are on the GPU.
struct EmuBf16 {
  uint16_t bits;
};
struct EmuF16 {
  uint16_t bits;
};
inline float to_f32(EmuBf16 x) { return bf16_to_f32(x.bits); }
inline float to_f32(EmuF16 x) { return f16_to_f32(x.bits); }
template <class T>
T from_f32(float x);
template <>
inline EmuBf16 from_f32<EmuBf16>(float x) {
  return {f32_to_bf16(x)};
}
template <>
inline EmuF16 from_f32<EmuF16>(float x) {
  return {f32_to_f16(x)};
}
inline void copy16(void* dst, const void* src) { std::memcpy(dst, src, 16); }

struct EmuLane {
  int lane = 0;
  std::barrier<>* warp = nullptr;
  std::barrier<>* block = nullptr;
};
inline thread_local EmuLane emu_lane;
inline void sync_block() { emu_lane.block->arrive_and_wait(); }
inline void sync_warp() { emu_lane.warp->arrive_and_wait(); }

namespace wm {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class E, class Layout = void>
struct fragment {
  E x[16][16];
};
using Acc = fragment<accumulator, 16, 16, 16, float>;

template <class E>
void check_tile_address(const char* op, const E* p, unsigned ldm) {
  trainer::testing::check_tile_address("flash emulator", op, p, ldm);
}

// Element (r, c) of an A (rows x k) or B (k x cols) operand.
template <class Use, class E, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, E, L>& f, const E* p, unsigned ldm) {
  check_tile_address("load_matrix_sync", p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r][c] = std::is_same_v<L, row_major> ? p[r * ldm + c] : p[c * ldm + r];
}
inline void load_matrix_sync(Acc& f, const float* p, unsigned ldm, layout_t layout) {
  check_tile_address("load_matrix_sync", p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r][c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}
inline void store_matrix_sync(float* p, const Acc& f, unsigned ldm, layout_t layout) {
  check_tile_address("store_matrix_sync", p, ldm);
  if (emu_lane.lane != 0) return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r][c];
}
inline void fill_fragment(Acc& f, float v) {
  for (auto& row : f.x)
    for (float& x : row) x = v;
}
template <class E, class LA, class LB>
void mma_sync(Acc& d, const fragment<matrix_a, 16, 16, 16, E, LA>& a,
              const fragment<matrix_b, 16, 16, 16, E, LB>& b, const Acc& c) {
  Acc t;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[r][n];
      for (int k = 0; k < 16; ++k) s += to_f32(a.x[r][k]) * to_f32(b.x[k][n]);
      t.x[r][n] = s;
    }
  d = t;
}
}  // namespace wm

}  // namespace trainer::flash

#include "kernels/cuda/flash_attention_tiles.h"

namespace trainer::flash {

// Runs body(Thread, shared memory) for every block of a (gx, gy) grid, one block
// at a time, each with kThreads threads.
template <class Body>
void run_grid(int gx, int gy, size_t smem_bytes, const Body& body) {
  std::vector<unsigned char> smem;
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx) {
      smem.assign(smem_bytes + 128, 0xFF);
      auto* base = reinterpret_cast<unsigned char*>(
          (reinterpret_cast<uintptr_t>(smem.data()) + 127) / 128 * 128);
      std::barrier<> block(kThreads);
      std::vector<std::unique_ptr<std::barrier<>>> warps;
      for (int w = 0; w < kWarps; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
      std::vector<std::thread> threads;
      for (int tid = 0; tid < kThreads; ++tid)
        threads.emplace_back([&, tid] {
          emu_lane = {tid % 32, warps[tid / 32].get(), &block};
          body(Thread{tid, bx, by}, base);
        });
      for (std::thread& t : threads) t.join();
    }
}

// The launches of flash_attention.cu, on the emulator.
template <class T>
void emulated_forward(const Problem& p) {
  run_grid(p.B * p.H, tiles(p.Tq), ForwardSmem<T>(nullptr, p.D).bytes(),
           [&](const Thread& th, unsigned char* sm) { forward_tile<T>(p, sm, th); });
}
template <class T>
void emulated_backward(const Problem& p) {
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.Tq;
  run_grid(static_cast<int>((rows + kThreads - 1) / kThreads), 1, 0,
           [&](const Thread& th, unsigned char*) { delta_rows<T>(p, th); });
  run_grid(p.B * p.Hkv, tiles(p.Tk), BackwardKvSmem<T>(nullptr, p.D).bytes(),
           [&](const Thread& th, unsigned char* sm) { backward_kv_tile<T>(p, sm, th); });
  run_grid(p.B * p.H, tiles(p.Tq), BackwardQSmem<T>(nullptr, p.D).bytes(),
           [&](const Thread& th, unsigned char* sm) { backward_q_tile<T>(p, sm, th); });
}

}  // namespace trainer::flash
