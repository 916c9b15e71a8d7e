// The CUDA executor of flash_attention_tiles.h: nvcuda::wmma for the tile
// products, __syncthreads / __syncwarp for the fences, 16-byte vector copies,
// and the launchers (dynamic shared memory above 48 KiB is opted into per kernel).
#include <mma.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"

namespace trainer::flash {

#define FA_FN __device__ __forceinline__
#define FA_HD __host__ __device__ __forceinline__
namespace wm = nvcuda::wmma;
constexpr float kNegInf = -INFINITY;

__device__ __forceinline__ void sync_block() { __syncthreads(); }
__device__ __forceinline__ void sync_warp() { __syncwarp(); }
template <class T>
__device__ __forceinline__ float to_f32(T x) {
  return cuda::to_float(x);
}
template <class T>
__device__ __forceinline__ T from_f32(float x) {
  return cuda::from_float<T>(x);
}
__device__ __forceinline__ void copy16(void* dst, const void* src) {
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
}

}  // namespace trainer::flash

#include "kernels/cuda/flash_attention_tiles.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

using flash::kThreads;
using flash::Problem;

__device__ __forceinline__ flash::Thread this_thread() {
  return {static_cast<int>(threadIdx.x), static_cast<int>(blockIdx.x),
          static_cast<int>(blockIdx.y)};
}

// Every pass is one tile program of flash_attention_tiles.h run by one block.
template <void (*Tile)(const Problem&, unsigned char*, const flash::Thread&)>
__global__ void __launch_bounds__(kThreads) tile_kernel(Problem p) {
  extern __shared__ __align__(128) unsigned char smem[];
  Tile(p, smem, this_thread());
}
template <class T>
__global__ void __launch_bounds__(kThreads) delta_kernel(Problem p) {
  flash::delta_rows<T>(p, this_thread());
}

flash::Heads heads_of(const Tensor& t) {
  return {t.data, t.stride[0], t.stride[1], t.stride[2]};
}

bool vector_aligned(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (t.shape[d] > 1 && t.stride[d] % flash::kVec != 0) return false;
  return t.stride[3] == 1;
}

Problem problem_of(const Tensor& q, const Tensor& k, const Tensor& lse, int64_t q_offset,
                   const Tensor& doc_start, int64_t window) {
  Problem p;
  p.window = window;
  p.doc_start = static_cast<const int32_t*>(doc_start.data);
  p.doc_sb = doc_start.empty() ? 0 : doc_start.stride[0];
  p.q = heads_of(q);
  p.B = static_cast<int>(q.shape[0]), p.Tq = static_cast<int>(q.shape[1]);
  p.H = static_cast<int>(q.shape[2]), p.D = static_cast<int>(q.shape[3]);
  p.Tk = static_cast<int>(k.shape[1]), p.Hkv = static_cast<int>(k.shape[2]);
  p.lse = static_cast<float*>(lse.data);
  p.lse_bh = p.Tq;
  p.q_offset = q_offset;
  p.scale = 1.0f / std::sqrt(static_cast<float>(p.D));
  return p;
}

// Dynamic shared memory past the default 48 KiB must be opted into per kernel.
template <class K>
void launch(K kernel, dim3 grid, size_t smem, const Problem& p, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(p);
  CUDA_LAUNCH_CHECK();
}

void check_offset(const Problem& p, const char* op) {
  TRAINER_CHECK(p.q_offset >= 0 && p.q_offset + p.Tq <= p.Tk,
                "{}: queries at [{}, {}) need keys up to there, got {}", op, p.q_offset,
                p.q_offset + p.Tq, p.Tk);
}

}  // namespace

bool flash_attention_applies(const CudaState& st, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& lse,
                             std::initializer_list<const Tensor*> others) {
  if (!st.flash_attention) return false;
  // The shape part is the planner's too (kernels/op_scratch.h).
  if (!flash_attention_shape_applies(q.dtype, q.shape[0], q.shape[1], k.shape[1], q.shape[2],
                                     k.shape[2], q.shape[3]))
    return false;
  if (!lse.contiguous()) return false;
  for (const Tensor* t : {&q, &k, &v})
    if (!vector_aligned(*t)) return false;
  for (const Tensor* t : others)
    if (t->dtype != q.dtype || !vector_aligned(*t)) return false;
  return true;
}

namespace {

template <class T>
void forward_as(CudaState& st, const Problem& p) {
  launch(tile_kernel<flash::forward_tile<T>>,
         dim3(static_cast<unsigned>(p.B * p.H), static_cast<unsigned>(flash::tiles(p.Tq))),
         flash::ForwardSmem<T>(nullptr, p.D).bytes(), p, st.stream);
}

template <class T>
void backward_as(CudaState& st, const Problem& p, int64_t rows) {
  delta_kernel<T><<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0,
                    st.stream>>>(p);
  CUDA_LAUNCH_CHECK();
  launch(tile_kernel<flash::backward_kv_tile<T>>,
         dim3(static_cast<unsigned>(p.B * p.Hkv), static_cast<unsigned>(flash::tiles(p.Tk))),
         flash::BackwardKvSmem<T>(nullptr, p.D).bytes(), p, st.stream);
  launch(tile_kernel<flash::backward_q_tile<T>>,
         dim3(static_cast<unsigned>(p.B * p.H), static_cast<unsigned>(flash::tiles(p.Tq))),
         flash::BackwardQSmem<T>(nullptr, p.D).bytes(), p, st.stream);
}

}  // namespace

void flash_attention_forward(CudaState& st, Tensor out, Tensor lse, Tensor q, Tensor k,
                             Tensor v, int64_t q_offset, Tensor doc_start, int64_t window) {
  Problem p = problem_of(q, k, lse, q_offset, doc_start, window);
  check_offset(p, "flash_attention_forward");
  p.k = heads_of(k), p.v = heads_of(v), p.out = heads_of(out);
  if (q.dtype == DType::bf16) forward_as<__nv_bfloat16>(st, p);
  else forward_as<__half>(st, p);
}

void flash_attention_backward(CudaState& st, Tensor dq, Tensor dk, Tensor dv, Tensor dout,
                              Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,
                              int64_t q_offset, Tensor doc_start, int64_t window) {
  Problem p = problem_of(q, k, lse, q_offset, doc_start, window);
  check_offset(p, "flash_attention_backward");
  p.k = heads_of(k), p.v = heads_of(v), p.out = heads_of(out), p.dout = heads_of(dout);
  p.dq = heads_of(dq), p.dk = heads_of(dk), p.dv = heads_of(dv);
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.Tq;
  p.delta = static_cast<float*>(scratch(
      st, attention_backward_scratch_bytes({p.B, p.Tq, p.Tk, p.H, p.Hkv, q.shape[3], q.dtype}, true),
      "flash_attention_backward"));
  if (q.dtype == DType::bf16) backward_as<__nv_bfloat16>(st, p, rows);
  else backward_as<__half>(st, p, rows);
}

}  // namespace trainer::cuda
