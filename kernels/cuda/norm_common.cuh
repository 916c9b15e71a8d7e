// Shared by the row norms (layernorm.cu, rmsnorm.cu): their argument checks and
// grid, and the choice between 16-byte packed row access (pack.cuh) and one
// element per lane. Both run one warp per row; a kernel templated on V (elements
// a lane takes per step) is the scalar kernel at V = 1 and the packed one at V =
// the activations' pack width, so the two paths share every line of their math.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pack.cuh"

namespace trainer::cuda::norm {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each
constexpr int kThreads = kRowsPerBlock * 32;

// The warp's row; a row >= N leaves with its whole warp, so no shuffle misses a lane.
__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
}

// The packed access itself (pack.cuh), under the names the norm kernels use.
using pack::Floats;
using pack::load;
using pack::Pack;
using pack::store;

// Calls f(c, the V elements at c of each of `rows`...) for each of this lane's
// steps along a row of C elements: lane l starts at l * V and moves 32 * V on,
// so each warp step reads 32 * V consecutive elements of every row (coalesced).
template <int V, class F, class... X>
__device__ __forceinline__ void for_lane_steps(int64_t C, F&& f, const X*... rows) {
  for (int64_t c = static_cast<int64_t>(threadIdx.x % 32) * V; c < C; c += 32 * V)
    f(c, load<V>(rows + c)...);
}

// Whether the packed kernel may run: every base pointer 16-byte aligned and a
// row of C elements a whole number of packs of each tensor's own dtype.
inline bool vector_rows(int64_t C, std::initializer_list<const Tensor*> tensors) {
  return pack::packable(C, tensors);
}

// Rows of C elements of `dtype`, N of them.
inline void check_rows(const Tensor& t, int64_t N, int64_t C, DType dtype, const char* op,
                       const char* name) {
  check_cuda(t, op, name);
  TRAINER_CHECK(t.ndim >= 1 && t.size(-1) == C && t.numel() == N * C && t.dtype == dtype,
                "{}: {} is {}, expected ({}, {}) {}", op, name, t.str(), N, C, dtype_name(dtype));
}

// A per-row or per-channel vector: any shape with n elements.
inline void check_vec(const Tensor& t, int64_t n, DType dtype, const char* op, const char* name) {
  check_cuda(t, op, name);
  TRAINER_CHECK(t.numel() == n && t.dtype == dtype, "{}: {} is {}, expected {} elements of {}",
                op, name, t.str(), n, dtype_name(dtype));
}

// The rows of `inp` (on the GPU, contiguous, fp32/bf16/fp16): N of width C.
struct Rows {
  int64_t N, C;
};
inline Rows rows_of(const Tensor& inp, const char* op) {
  check_cuda(inp, op, "inp");
  check_float_dtype(inp, op, "inp");
  const int64_t C = inp.size(-1);
  return {C ? inp.numel() / C : 0, C};
}

// What both forwards take: out rows like inp's, a per-channel weight (fp32 or
// the activations' dtype: TRAINER_PARAM_DISPATCH checks which), fp32 rstd per row.
inline Rows check_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                          const Tensor& weight, const char* op) {
  const Rows r = rows_of(inp, op);
  check_rows(out, r.N, r.C, inp.dtype, op, "out");
  check_vec(weight, r.C, weight.dtype, op, "weight");
  check_vec(rstd, r.N, DType::f32, op, "rstd");
  return r;
}

// What both backwards take: dinp and dout rows like inp's, the weight and its
// fp32 gradient per channel, fp32 rstd per row.
inline Rows check_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                           const Tensor& inp, const Tensor& weight, const Tensor& rstd,
                           const char* op) {
  const Rows r = rows_of(inp, op);
  check_rows(dinp, r.N, r.C, inp.dtype, op, "dinp");
  check_rows(dout, r.N, r.C, inp.dtype, op, "dout");
  check_vec(weight, r.C, weight.dtype, op, "weight");
  check_vec(dweight, r.C, DType::f32, op, "dweight");
  check_vec(rstd, r.N, DType::f32, op, "rstd");
  return r;
}

// Blocks for N rows (N > 0), refused beyond gridDim.x.
inline unsigned row_blocks(int64_t N, const char* op) {
  const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  TRAINER_CHECK(blocks < (int64_t{1} << 31), "{}: {} rows exceed the grid", op, N);
  return static_cast<unsigned>(blocks);
}

}  // namespace trainer::cuda::norm

// Inside TRAINER_FLOAT_DISPATCH: runs BODY with `V`, the elements a lane loads at
// a time, bound to T's pack width when `vec` (norm::vector_rows), else 1.
#define TRAINER_NORM_WIDTH_DISPATCH(vec, ...) TRAINER_PACK_WIDTH_DISPATCH(vec, T, __VA_ARGS__)
