// Rotary position embedding (rotate-half layout), forward and inverse, fp32/bf16/fp16
// (kernels/rope.h). Angles are computed in double: positions reach 10^5 and a
// float angle would lose the low bits the rotation depends on. With positions
// (documents packed into a sequence) each token's angle comes from its own
// position instead of pos_offset + t.
#include "kernels/cuda/common.cuh"
#include "kernels/rope.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per rotated pair (b, t, h, i < D/2); sign = +1 forward, -1 transpose.
// positions: (B, T) contiguous, or null for pos_offset + t.
template <class T>
__global__ void rope_kernel(T* out, const T* inp, int64_t T_len, int64_t H, int64_t D,
                            double log_theta, RopeScaling scaling, int64_t pos_offset,
                            const int32_t* positions, float sign, int64_t num_pairs) {
  const int64_t half = D / 2;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < num_pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p % half;
    const int64_t row = p / half;  // (b, t, h) flattened
    const int64_t token = row / H;  // (b, t) flattened
    const int64_t at = positions ? positions[token] : pos_offset + token % T_len;
    const double inv_freq = scaled_inv_freq(
        exp(-log_theta * (2.0 * static_cast<double>(i) / static_cast<double>(D))), i, scaling);
    double s, c;
    sincos(static_cast<double>(at) * inv_freq, &s, &c);
    // Backward is the transpose of the scaled rotation: the same magnitude.
    const double m = rope_magnitude(scaling);
    const float cs = static_cast<float>(m * c), sn = sign * static_cast<float>(m * s);
    const int64_t base = row * D;
    const float x0 = to_float(inp[base + i]), x1 = to_float(inp[base + i + half]);
    out[base + i] = from_float<T>(x0 * cs - x1 * sn);
    out[base + i + half] = from_float<T>(x1 * cs + x0 * sn);
  }
}

void launch(Context& ctx, Tensor out, Tensor inp, const Rope& rope, int64_t pos_offset,
            const Tensor& positions, float sign, const char* op) {
  const float theta = rope.theta;
  CudaState& st = state_of(ctx);
  check_cuda(out, op, "out");
  check_cuda(inp, op, "inp");
  TRAINER_CHECK(inp.ndim == 4, "{}: input {} must be (B, T, H, D)", op, inp.str());
  check_shape(out, {inp.shape[0], inp.shape[1], inp.shape[2], inp.shape[3]}, op);
  TRAINER_CHECK(out.dtype == inp.dtype, "{}: dtypes of {} and {} differ", op, out.str(), inp.str());
  const int64_t D = inp.shape[3];
  TRAINER_CHECK(D % 2 == 0, "{}: head dim {} must be even", op, D);
  TRAINER_CHECK(theta > 0.0f && pos_offset >= 0, "{}: theta {} and pos_offset {}", op, theta,
                pos_offset);
  if (!positions.empty()) {
    check_cuda(positions, op, "positions");
    check_dtype(positions, DType::i32, op, "positions");
    check_shape(positions, {inp.shape[0], inp.shape[1]}, op);
    TRAINER_CHECK(pos_offset == 0, "{}: positions given with pos_offset {}", op, pos_offset);
  }
  const int64_t num_pairs = inp.numel() / 2;
  if (num_pairs == 0) return;
  const double log_theta = log(static_cast<double>(theta));
  TRAINER_FLOAT_DISPATCH(inp.dtype, op, {
    rope_kernel<T><<<grid_for(num_pairs, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const T*>(inp.data), inp.shape[1], inp.shape[2], D,
        log_theta, rope.scaling, pos_offset, static_cast<const int32_t*>(positions.data), sign,
        num_pairs);
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void rope_forward(Context& ctx, Tensor out, Tensor inp, Rope rope, int64_t pos_offset,
                  Tensor positions) {
  launch(ctx, out, inp, rope, pos_offset, positions, 1.0f, "rope_forward");
}

void rope_backward(Context& ctx, Tensor dinp, Tensor dout, Rope rope, int64_t pos_offset,
                   Tensor positions) {
  launch(ctx, dinp, dout, rope, pos_offset, positions, -1.0f, "rope_backward");
}

}  // namespace trainer::cuda
