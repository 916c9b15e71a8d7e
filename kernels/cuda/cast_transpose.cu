// Cast + transpose to fp8 (kernels/cast_transpose.h): 32 x 32 tiles through shared
// memory, so both the read of src and the write of out_t are coalesced. The element
// conversion is cast.cu's (one fp32 multiply, NaN passed through, numeric.h's
// saturating round), so the codes equal the CPU op's bit for bit.
#include <algorithm>

#include "kernels/cast_transpose.h"
#include "kernels/cuda/common.cuh"
#include "kernels/float_formats.h"

namespace trainer::cuda {
namespace {

using namespace float_format;

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // blockDim.y: each thread converts kTile / 8 elements

// Grid x over column tiles, y over row tiles (looping past gridDim.y's limit).
// Codes wait in 32-bit words: a byte tile would put 4 threads on one bank.
template <class Src, class Dst>
__global__ void cast_transpose_kernel(typename Dst::T* out, typename Dst::T* out_t,
                                      const typename Src::T* src, const float* scale, int64_t R,
                                      int64_t C) {
  __shared__ uint32_t tile[kTile][kTile + 1];
  const float s = scale ? *scale : 1.0f;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t row_tiles = (R + kTile - 1) / kTile;
  for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
    const int64_t r0 = rt * kTile;
    for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
      const int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < R && c < C) {
        float x = Src::load(src[r * C + c]);
        if (scale && !isnan(x)) x = __fmul_rn(x, s);
        const typename Dst::T code = Dst::store(x);
        if (out) out[r * C + c] = code;
        tile[j][threadIdx.x] = code;
      }
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
      const int64_t c = c0 + j, r = r0 + threadIdx.x;
      if (c < C && r < R) out_t[c * R + r] = static_cast<typename Dst::T>(tile[threadIdx.x][j]);
    }
    __syncthreads();  // the next row tile overwrites the tile
  }
}

template <class F>
void with_src_format(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::f32: f(F32{}); return;
    case DType::bf16: f(BF16{}); return;
    case DType::f16: f(F16{}); return;
    default: break;
  }
  TRAINER_CHECK(false, "{}: src has dtype {}, expected fp32, bf16 or fp16", op, dtype_name(d));
}

template <class F>
void with_fp8_format(DType d, const char* op, F&& f) {
  if (d == DType::e4m3) return f(E4M3{});
  if (d == DType::e5m2) return f(E5M2{});
  TRAINER_CHECK(false, "{}: out_t has dtype {}, expected e4m3 or e5m2", op, dtype_name(d));
}

}  // namespace

void cast_transpose(Context& ctx, Tensor out, Tensor out_t, Tensor src, Tensor scale) {
  const char* op = "cast_transpose";
  CudaState& st = state_of(ctx);
  check_cuda(src, op, "src");
  check_cuda(out_t, op, "out_t");
  TRAINER_CHECK(src.ndim == 2, "{}: src {} must be (R, C)", op, src.str());
  const int64_t R = src.shape[0], C = src.shape[1];
  check_shape(out_t, {C, R}, "cast_transpose out_t");
  if (!out.empty()) {
    check_cuda(out, op, "out");
    check_shape(out, {R, C}, "cast_transpose out");
    check_dtype(out, out_t.dtype, op, "out");
  }
  if (!scale.empty()) {
    check_cuda(scale, op, "scale");
    TRAINER_CHECK(scale.dtype == DType::f32 && scale.numel() == 1, "{}: scale {} must be (1) fp32",
                  op, scale.str());
  }
  if (R == 0 || C == 0) return;
  const int64_t col_tiles = (C + kTile - 1) / kTile, row_tiles = (R + kTile - 1) / kTile;
  TRAINER_CHECK(col_tiles < (int64_t{1} << 31), "{}: {} columns exceed the grid", op, C);
  const dim3 grid(static_cast<unsigned>(col_tiles),
                  static_cast<unsigned>(std::min<int64_t>(row_tiles, kMaxGridY)));
  const float* s = scale.empty() ? nullptr : static_cast<const float*>(scale.data);
  with_src_format(src.dtype, op, [&](auto src_fmt) {
    with_fp8_format(out_t.dtype, op, [&](auto dst_fmt) {
      using Src = decltype(src_fmt);
      using Dst = decltype(dst_fmt);
      cast_transpose_kernel<Src, Dst><<<grid, dim3(kTile, kRowsPerPass), 0, st.stream>>>(
          out.empty() ? nullptr : static_cast<typename Dst::T*>(out.data),
          static_cast<typename Dst::T*>(out_t.data), static_cast<const typename Src::T*>(src.data),
          s, R, C);
    });
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
