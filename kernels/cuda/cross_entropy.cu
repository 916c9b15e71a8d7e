// Vocab-parallel softmax cross-entropy in three passes plus backward
// (kernels/cross_entropy.h). One block per row; rows of Vp logits are indexed in
// 64 bits (N * Vp exceeds 2^31 at GPT-2 sizes). Logits fp32, bf16 or fp16, statistics fp32.
#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/common.cuh"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

// Columns [0, valid) of a row are real vocabulary on this rank; the rest is padding.
__host__ __device__ inline int64_t valid_columns(int64_t Vp, int64_t vocab_start,
                                                 int64_t vocab_size) {
  const int64_t v = vocab_size - vocab_start;
  return v < 0 ? 0 : (v < Vp ? v : Vp);
}

template <class T>
__global__ void max_kernel(float* maxv, const T* logits, int64_t Vp, int64_t valid) {
  __shared__ float shared[32];
  const T* row = logits + static_cast<int64_t>(blockIdx.x) * Vp;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < valid; c += blockDim.x) m = fmaxf(m, to_float(row[c]));
  m = block_max(m, shared);
  if (threadIdx.x == 0) maxv[blockIdx.x] = m;
}

template <class T>
__global__ void sumexp_kernel(float* sumexp, float* target_logit, const T* logits,
                              const float* maxv, const int32_t* targets, int64_t Vp,
                              int64_t valid, int64_t vocab_start) {
  __shared__ float shared[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * Vp;
  const float m = maxv[n];
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < valid; c += blockDim.x) s += expf(to_float(row[c]) - m);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    sumexp[n] = s;
    const int64_t local = static_cast<int64_t>(targets[n]) - vocab_start;
    const bool here = targets[n] >= 0 && local >= 0 && local < valid;
    target_logit[n] = here ? to_float(row[local]) : 0.0f;
  }
}

__global__ void loss_kernel(float* losses, const float* maxv, const float* sumexp,
                            const float* target_logit, const int32_t* targets, int64_t N) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    losses[n] = targets[n] < 0 ? 0.0f : logf(sumexp[n]) + maxv[n] - target_logit[n];
}

// Each element is read before it is written by the same thread: dlogits may alias logits.
template <class T>
__global__ void backward_kernel(T* dlogits, const T* logits, const float* maxv,
                                const float* sumexp, const int32_t* targets, const float* dloss,
                                int64_t Vp, int64_t valid, int64_t vocab_start) {
  const int64_t n = blockIdx.x;
  const T* row = logits + n * Vp;
  T* drow = dlogits + n * Vp;
  const int32_t target = targets[n];
  const float m = maxv[n];
  const float scale = target < 0 ? 0.0f : dloss[n] / sumexp[n];
  const float dl = target < 0 ? 0.0f : dloss[n];
  const int64_t local = static_cast<int64_t>(target) - vocab_start;
  for (int64_t c = threadIdx.x; c < Vp; c += blockDim.x) {
    float g = 0.0f;
    if (c < valid) {
      g = expf(to_float(row[c]) - m) * scale;
      if (c == local) g -= dl;
    }
    drow[c] = from_float<T>(g);
  }
}

int64_t rows_of(const Tensor& logits, const char* op) {
  check_cuda(logits, op, "logits");
  check_float_dtype(logits, op, "logits");
  TRAINER_CHECK(logits.ndim >= 2, "{}: logits {} must be (N, Vp)", op, logits.str());
  const int64_t N = logits.numel() / logits.size(-1);
  TRAINER_CHECK(N < (int64_t{1} << 31), "{}: {} rows exceed the grid", op, N);
  return N;
}

void check_vec(const Tensor& t, int64_t n, DType dtype, const char* op, const char* name) {
  check_cuda(t, op, name);
  TRAINER_CHECK(t.numel() == n && t.dtype == dtype, "{}: {} is {}, expected {} elements of {}",
                op, name, t.str(), n, dtype_name(dtype));
}

}  // namespace

void cross_entropy_max(Context& ctx, Tensor maxv, Tensor logits, int64_t vocab_start,
                       int64_t vocab_size) {
  const char* op = "cross_entropy_max";
  CudaState& st = state_of(ctx);
  const int64_t N = rows_of(logits, op), Vp = logits.size(-1);
  check_vec(maxv, N, DType::f32, op, "maxv");
  if (N == 0) return;
  const int64_t valid = valid_columns(Vp, vocab_start, vocab_size);
  TRAINER_FLOAT_DISPATCH(logits.dtype, op, {
    max_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, st.stream>>>(
        static_cast<float*>(maxv.data), static_cast<const T*>(logits.data), Vp, valid);
  });
  CUDA_LAUNCH_CHECK();
}

void cross_entropy_sumexp(Context& ctx, Tensor sumexp, Tensor target_logit, Tensor logits,
                          Tensor maxv, Tensor targets, int64_t vocab_start, int64_t vocab_size) {
  const char* op = "cross_entropy_sumexp";
  CudaState& st = state_of(ctx);
  const int64_t N = rows_of(logits, op), Vp = logits.size(-1);
  check_vec(sumexp, N, DType::f32, op, "sumexp");
  check_vec(target_logit, N, DType::f32, op, "target_logit");
  check_vec(maxv, N, DType::f32, op, "maxv");
  check_vec(targets, N, DType::i32, op, "targets");
  if (N == 0) return;
  const int64_t valid = valid_columns(Vp, vocab_start, vocab_size);
  TRAINER_FLOAT_DISPATCH(logits.dtype, op, {
    sumexp_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, st.stream>>>(
        static_cast<float*>(sumexp.data), static_cast<float*>(target_logit.data),
        static_cast<const T*>(logits.data), static_cast<const float*>(maxv.data),
        static_cast<const int32_t*>(targets.data), Vp, valid, vocab_start);
  });
  CUDA_LAUNCH_CHECK();
}

void cross_entropy_loss(Context& ctx, Tensor losses, Tensor maxv, Tensor sumexp,
                        Tensor target_logit, Tensor targets) {
  const char* op = "cross_entropy_loss";
  CudaState& st = state_of(ctx);
  const int64_t N = losses.numel();
  check_vec(losses, N, DType::f32, op, "losses");
  check_vec(maxv, N, DType::f32, op, "maxv");
  check_vec(sumexp, N, DType::f32, op, "sumexp");
  check_vec(target_logit, N, DType::f32, op, "target_logit");
  check_vec(targets, N, DType::i32, op, "targets");
  if (N == 0) return;
  loss_kernel<<<grid_for(N, kThreads), kThreads, 0, st.stream>>>(
      static_cast<float*>(losses.data), static_cast<const float*>(maxv.data),
      static_cast<const float*>(sumexp.data), static_cast<const float*>(target_logit.data),
      static_cast<const int32_t*>(targets.data), N);
  CUDA_LAUNCH_CHECK();
}

void cross_entropy_backward(Context& ctx, Tensor dlogits, Tensor logits, Tensor maxv,
                            Tensor sumexp, Tensor targets, Tensor dloss, int64_t vocab_start,
                            int64_t vocab_size) {
  const char* op = "cross_entropy_backward";
  CudaState& st = state_of(ctx);
  const int64_t N = rows_of(logits, op), Vp = logits.size(-1);
  check_cuda(dlogits, op, "dlogits");
  TRAINER_CHECK(dlogits.numel() == logits.numel() && dlogits.size(-1) == Vp &&
                    dlogits.dtype == logits.dtype,
                "{}: dlogits {} vs logits {}", op, dlogits.str(), logits.str());
  check_vec(maxv, N, DType::f32, op, "maxv");
  check_vec(sumexp, N, DType::f32, op, "sumexp");
  check_vec(targets, N, DType::i32, op, "targets");
  check_vec(dloss, N, DType::f32, op, "dloss");
  if (N == 0) return;
  const int64_t valid = valid_columns(Vp, vocab_start, vocab_size);
  TRAINER_FLOAT_DISPATCH(logits.dtype, op, {
    backward_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, st.stream>>>(
        static_cast<T*>(dlogits.data), static_cast<const T*>(logits.data),
        static_cast<const float*>(maxv.data), static_cast<const float*>(sumexp.data),
        static_cast<const int32_t*>(targets.data), static_cast<const float*>(dloss.data), Vp,
        valid, vocab_start);
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
