// 16-byte packed access for the bandwidth-bound kernels (the row norms, the
// elementwise ops). A kernel templated on V, the elements it moves at a time, is
// the scalar kernel at V = 1 and the packed one at V = a pack's elements, so
// both paths share every line of their math; the launcher picks V per call
// (packable), because a slice or shard of a cudaMalloc block can start anywhere.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace trainer::cuda::pack {

// 16 bytes of X: one vector load or store.
template <class X>
struct alignas(16) Pack {
  static constexpr int kN = 16 / static_cast<int>(sizeof(X));
  X v[kN];
};

// Of two element types, the one with more elements to a pack: a step of its pack
// width is whole packs of both.
template <class A, class B>
using Narrowest = std::conditional_t<sizeof(A) <= sizeof(B), A, B>;

// V consecutive elements in fp32.
template <int V>
struct Floats {
  float v[V];
  __device__ __forceinline__ float& operator[](int j) { return v[j]; }
  __device__ __forceinline__ float operator[](int j) const { return v[j]; }
};

// V elements from p. V = 1 is a plain load; otherwise whole packs, so p must be
// 16-byte aligned (packable checks every base pointer, and a step is whole packs
// of every dtype involved).
template <int V, class X>
__device__ __forceinline__ Floats<V> load(const X* p) {
  Floats<V> f;
  if constexpr (V == 1) {
    f[0] = to_float(p[0]);
  } else {
    static_assert(V * sizeof(X) % 16 == 0, "a packed step must be whole packs of X");
    constexpr int kN = Pack<X>::kN;
#pragma unroll
    for (int i = 0; i < V / kN; ++i) {
      const Pack<X> pk = reinterpret_cast<const Pack<X>*>(p)[i];
#pragma unroll
      for (int j = 0; j < kN; ++j) f[i * kN + j] = to_float(pk.v[j]);
    }
  }
  return f;
}

// V values to p, each rounded once (from_float); the same alignment rule as load.
template <int V, class X>
__device__ __forceinline__ void store(X* p, const Floats<V>& f) {
  if constexpr (V == 1) {
    p[0] = from_float<X>(f[0]);
  } else {
    static_assert(V * sizeof(X) % 16 == 0, "a packed step must be whole packs of X");
    constexpr int kN = Pack<X>::kN;
#pragma unroll
    for (int i = 0; i < V / kN; ++i) {
      Pack<X> pk;
#pragma unroll
      for (int j = 0; j < kN; ++j) pk.v[j] = from_float<X>(f[i * kN + j]);
      reinterpret_cast<Pack<X>*>(p)[i] = pk;
    }
  }
}

// Whether the packed kernel may run over spans of n elements (a row, or a whole
// flat tensor): every base pointer 16-byte aligned and n a whole number of
// 16-byte packs of each tensor's own dtype (bf16 with fp32: n a multiple of 8
// and of 4).
inline bool packable(int64_t n, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    const int64_t per_pack = 16 / static_cast<int64_t>(dtype_size(t->dtype));
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0 || n % per_pack != 0) return false;
  }
  return true;
}

// A flat kernel's grid-stride loop over n elements, V at a time (n a multiple of
// V): calls f(i) with each step's first element, in 64 bits.
template <int V, class F>
__device__ __forceinline__ void for_each_step(int64_t n, F&& f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n;
       i += stride)
    f(i);
}

}  // namespace trainer::cuda::pack

// Runs BODY with `V`, the elements a step moves, bound to X's pack width when
// `vec` (pack::packable), else 1. X is the narrowest element type the step
// touches (pack::Narrowest), so a step is whole packs of every one.
#define TRAINER_PACK_WIDTH_DISPATCH(vec, X, ...)           \
  do {                                                    \
    if (vec) {                                            \
      constexpr int V = ::trainer::cuda::pack::Pack<X>::kN; \
      __VA_ARGS__;                                        \
    } else {                                              \
      constexpr int V = 1;                                \
      __VA_ARGS__;                                        \
    }                                                     \
  } while (0)
