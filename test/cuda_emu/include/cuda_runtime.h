// The CUDA emulator's device side: what a kernel may use, on the host.
//
// A launch runs its blocks one after another; a block's threads are fibers on
// the calling thread (test/cuda_emu/scheduler.cpp), switched only at __syncthreads,
// __syncwarp and the warp collectives, each of which waits for exactly the
// threads the real instruction waits for. So a missing barrier reads data no
// other thread has written yet, a collective over an exited lane or a barrier
// only some threads reach is reported as the hang it is on a GPU, and each
// launch alternates the order threads run in (forward, then reverse), so an
// op run twice gives different bits if it races. `kernel<<<grid, block, smem,
// stream>>>(args)` is rewritten at build time (rewrite_cu.cmake) into
// `kernel * LaunchConfig(__FILE__, __LINE__, grid, block, smem, stream) % args(args)`, which checks
// the configuration as the driver does before running anything.
#pragma once

#include <algorithm>
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

// The runtime's C++ overloads for typed pointers, as cuda_runtime.h declares them.
template <class T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <class T>
cudaError_t cudaMallocHost(T** ptr, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __constant__
#define __managed__
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __grid_constant__

namespace cuda_emu {

struct ThreadState;
struct BlockState {
  uint3 block_idx;
  dim3 block_dim, grid_dim;
  unsigned char* dynamic_smem = nullptr;
};
// Where the running fiber is: the scheduler sets these before each switch
// (one host thread runs every fiber of a launch).
inline thread_local uint3 tls_thread_idx;
inline thread_local BlockState tls_block;
inline const uint3& thread_index() { return tls_thread_idx; }
inline const BlockState& block_state() { return tls_block; }
inline unsigned char* dynamic_shared() { return tls_block.dynamic_smem; }
// A static __shared__ variable (rewrite_cu.cmake): one heap block of exactly
// `bytes` per block run and declaration `site`, filled with 0xFF bytes when the
// block's first thread reaches it, so no block reads another's and a read past
// its end meets AddressSanitizer's redzone.
void* shared_block(const void* site, size_t bytes);
template <class T, class Site>
T& static_shared(Site) {
  static char site;  // one per declaration: each lambda passed as Site is its own type
  return *static_cast<T*>(shared_block(&site, sizeof(T)));
}
// For the tensor-core emulation (mma.h): a number no two block runs share, and
// how many products the calling thread has issued in this block.
uint64_t block_serial();
uint64_t next_product_index();

// The collectives: each suspends the calling thread until its group arrives.
void sync_block();
// Every lane of `mask` passes `value` and asks for lane `src`'s (or, for
// ballot, gets the mask of lanes whose value is non-zero).
enum class WarpOp { sync, shuffle, ballot };
uint64_t warp_collective(unsigned mask, WarpOp op, uint64_t value, int src);
unsigned live_lanes();

// The launch site (file:line of the `<<<`) names the kernel in reports.
struct LaunchConfig {
  const char* file;
  int line;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  LaunchConfig(const char* f, int l, dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr)
      : file(f), line(l), grid(g), block(b), smem(s), stream(st) {}
};

// Checks the launch as the driver does (a refusal is the last error) and queues
// it on its stream (streams.cpp): body(closure) then runs once per thread of
// every block.
using BodyFn = void (*)(void*);
void launch(const void* kernel, const LaunchConfig& cfg, BodyFn body, std::shared_ptr<void> closure);

template <class... P>
struct PendingLaunch {
  void (*fn)(P...);
  LaunchConfig cfg;
};

template <class... P>
PendingLaunch<P...> operator*(void (*fn)(P...), const LaunchConfig& cfg) {
  return {fn, cfg};
}

template <class... A>
std::tuple<A&&...> args(A&&... a) {
  return std::forward_as_tuple(std::forward<A>(a)...);
}

// Each parameter is converted once at the launch, as a GPU copies them into
// the kernel's parameter space; each thread then calls with its own copy.
template <class... P, class... A>
void operator%(const PendingLaunch<P...>& l, std::tuple<A...> a) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
  struct Closure {
    void (*fn)(P...);
    std::tuple<std::decay_t<P>...> params;
  };
  auto c = std::make_shared<Closure>(Closure{
      l.fn, std::apply([](auto&&... x) { return std::tuple<std::decay_t<P>...>(
                           std::forward<decltype(x)>(x)...); },
                       std::move(a))});
  launch(reinterpret_cast<const void*>(l.fn), l.cfg,
         [](void* p) {
           auto* cl = static_cast<Closure*>(p);
           std::apply(cl->fn, cl->params);
         },
         std::move(c));
}

}  // namespace cuda_emu

#define threadIdx (::cuda_emu::thread_index())
#define blockIdx (::cuda_emu::block_state().block_idx)
#define blockDim (::cuda_emu::block_state().block_dim)
#define gridDim (::cuda_emu::block_state().grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { cuda_emu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  cuda_emu::warp_collective(mask, cuda_emu::WarpOp::sync, 0, 0);
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline unsigned __activemask() { return cuda_emu::live_lanes(); }

namespace cuda_emu {
template <class T>
T shuffle(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a wide type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_collective(mask, WarpOp::shuffle, bits, src);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
inline int lane_id() { return static_cast<int>(thread_index().x % 32); }
}  // namespace cuda_emu

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = cuda_emu::lane_id();
  return cuda_emu::shuffle(mask, v, lane / width * width + (src % width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = cuda_emu::lane_id();
  int src = lane ^ lane_mask;
  if (src / width != lane / width) src = lane;
  return cuda_emu::shuffle(mask, v, src);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = cuda_emu::lane_id();
  int src = lane + static_cast<int>(delta);
  if (src / width != lane / width) src = lane;
  return cuda_emu::shuffle(mask, v, src);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = cuda_emu::lane_id();
  int src = lane - static_cast<int>(delta);
  if (src < 0 || src / width != lane / width) src = lane;
  return cuda_emu::shuffle(mask, v, src);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return static_cast<unsigned>(
      cuda_emu::warp_collective(mask, cuda_emu::WarpOp::ballot, pred != 0, 0));
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) == (mask & cuda_emu::live_lanes());
}

// Atomics: one host thread runs every fiber, and none switches inside these.
template <class T>
T atomicAdd(T* p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <class T>
T atomicMax(T* p, T v) {
  T old = *p;
  if (v > old) *p = v;
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  T old = *p;
  if (v < old) *p = v;
  return old;
}
template <class T>
T atomicExch(T* p, T v) {
  T old = *p;
  *p = v;
  return old;
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  T old = *p;
  if (old == compare) *p = v;
  return old;
}
template <class T>
T atomicOr(T* p, T v) {
  T old = *p;
  *p = old | v;
  return old;
}
template <class T>
T __ldg(const T* p) {
  return *p;
}

// Vector types (16-byte copies) and the bit casts.
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline int __float_as_int(float x) {
  int u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __int_as_float(int u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline long long __double_as_longlong(double x) {
  long long u;
  std::memcpy(&u, &x, 8);
  return u;
}
inline double __longlong_as_double(long long u) {
  double x;
  std::memcpy(&x, &u, 8);
  return x;
}

// Single-precision intrinsics: the IEEE operations they round like (the
// emulator's build has -ffp-contract=off, so nothing fuses behind them).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
// CUDA's math library puts these in the global namespace.
using std::isfinite;
using std::isinf;
using std::isnan;
using std::max;
using std::min;
