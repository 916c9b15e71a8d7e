// Router statistics on the device (kernels/moe_stats.h). moe_router_sums: each
// block of 32 token rows writes one double partial (its z-loss sum, a warp per
// row), then one pass adds the partials in block order: no atomics, the same
// bits on every run. moe_router_losses is E-sized work for one block, its
// z-loss on one thread in the CPU op's rounding (no fused multiply-adds).
#include <algorithm>

#include "kernels/cuda/moe_common.cuh"
#include "kernels/moe_stats.h"

namespace trainer::cuda {
namespace {

using moe::AnyFloat;

constexpr int kThreads = 256;

__global__ void router_partials_kernel(AnyFloat logits, int64_t N, int E,
                                       int64_t rows_per_chunk, double* partial) {
  __shared__ double warp_z[kThreads / 32];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * rows_per_chunk;
  const int64_t end = min(N, begin + rows_per_chunk);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  double z = 0.0;
  for (int64_t n = begin + warp; n < end; n += warps) {
    const int64_t row = n * E;
    float m = -INFINITY;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, logits.load(row + e));
    m = warp_max(m);
    double sum = 0.0;
    for (int e = lane; e < E; e += 32)
      sum += exp(static_cast<double>(logits.load(row + e)) - static_cast<double>(m));
    sum = moe::warp_sum_double(sum);
    const double lse = static_cast<double>(m) + log(sum);
    z = __dadd_rn(z, __dmul_rn(lse, lse));
  }
  if (lane == 0) warp_z[warp] = z;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int w = 0; w < warps; ++w) t += warp_z[w];
    partial[blockIdx.x] = t;
  }
}

__global__ void router_finish_kernel(double* sums, const int32_t* counts, const double* partial,
                                     int64_t chunks, int E) {
  const int64_t total = 2 * static_cast<int64_t>(E) + 1;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < total;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (j < 2 * E) {
      sums[j] = counts[j];
      continue;
    }
    double s = 0.0;
    for (int64_t k = 0; k < chunks; ++k) s += partial[k];
    sums[j] = s;
  }
}

__global__ void router_losses_kernel(AnyFloat z_loss, AnyFloat step, AnyFloat step_aux,
                                     const double* sums, int E, double tokens, float z_coeff) {
  if (threadIdx.x == 0) {
    const float z = static_cast<float>(sums[2 * E] / tokens);
    z_loss.store(0, z);
    if (step.data) step_aux.store(0, __fadd_rn(step_aux.load(0), __fmul_rn(z_coeff, z)));
  }
  if (step.data)
    for (int i = threadIdx.x; i < 2 * E; i += blockDim.x)
      step.store(i, __fadd_rn(step.load(i), static_cast<float>(sums[i])));
}

void check_f64(const Tensor& t, int64_t n, const char* op, const char* name) {
  check_cuda(t, op, name);
  check_dtype(t, DType::f64, op, name);
  TRAINER_CHECK(t.numel() == n, "{}: {} {} must hold {} values", op, name, t.str(), n);
}

// One block: thread 0 takes the mean in the CPU's order, then every thread
// moves its experts' biases by +-rate (rate * sign is exact, so the sum rounds
// once as on the CPU).
__global__ void bias_update_kernel(float* bias, const float* load, int E, float rate) {
  __shared__ double mean;
  if (threadIdx.x == 0) {
    double m = 0;
    for (int e = 0; e < E; ++e) m += load[e];
    mean = m / double(E);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const double err = mean - load[e];
    bias[e] = __fadd_rn(bias[e], __fmul_rn(rate, static_cast<float>((err > 0) - (err < 0))));
  }
}

}  // namespace

void moe_router_sums(Context& ctx, Tensor sums, Tensor counts, Tensor logits) {
  const char* op = "moe_router_sums";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(logits.ndim == 2, "{}: logits {} must be 2-D", op, logits.str());
  const int64_t N = logits.size(0), E = logits.size(-1);
  check_shape(counts, {2, E}, "moe_router_sums counts");
  moe::check_experts(E, op);
  check_f64(sums, 2 * E + 1, op, "sums");
  moe::check_i32_arg(counts, op, "counts");
  moe::check_float_arg(logits, op, "logits");
  const int64_t chunks = moe_router_sum_chunks(N);
  const int64_t rows_per_chunk = std::max<int64_t>(1, (N + chunks - 1) / chunks);
  double* partial = static_cast<double*>(scratch(st, moe_router_sums_scratch_bytes(N), op));
  router_partials_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, st.stream>>>(
      moe::any_float(logits, op, "logits"), N, static_cast<int>(E), rows_per_chunk, partial);
  CUDA_LAUNCH_CHECK();
  router_finish_kernel<<<grid_for(2 * E + 1, kThreads), kThreads, 0, st.stream>>>(
      static_cast<double*>(sums.data), static_cast<const int32_t*>(counts.data), partial, chunks,
      static_cast<int>(E));
  CUDA_LAUNCH_CHECK();
}

void moe_router_losses(Context& ctx, Tensor z_loss, Tensor step, Tensor step_aux, Tensor sums,
                       int64_t tokens, float z_coeff) {
  const char* op = "moe_router_losses";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(sums.numel() >= 3 && (sums.numel() - 1) % 2 == 0,
                "{}: sums {} must hold 2E + 1 values", op, sums.str());
  const int64_t E = (sums.numel() - 1) / 2;
  moe::check_experts(E, op);
  check_f64(sums, 2 * E + 1, op, "sums");
  TRAINER_CHECK(tokens > 0, "{}: tokens {} must be positive", op, tokens);
  TRAINER_CHECK(step.empty() == step_aux.empty(), "{}: step and step_aux go together", op);
  check_shape(z_loss, {1}, "moe_router_losses z_loss");
  moe::check_float_arg(z_loss, op, "z_loss");
  if (!step.empty()) {
    check_shape(step, {2, E}, "moe_router_losses step");
    check_shape(step_aux, {1}, "moe_router_losses step_aux");
    moe::check_float_arg(step, op, "step");
    moe::check_float_arg(step_aux, op, "step_aux");
  }
  router_losses_kernel<<<1, kThreads, 0, st.stream>>>(
      moe::any_float(z_loss, op, "z_loss"), moe::any_float(step, op, "step"),
      moe::any_float(step_aux, op, "step_aux"), static_cast<const double*>(sums.data),
      static_cast<int>(E), static_cast<double>(tokens), z_coeff);
  CUDA_LAUNCH_CHECK();
}

void moe_bias_update(Context& ctx, Tensor bias, Tensor load, float rate) {
  const char* op = "moe_bias_update";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(bias.ndim == 1, "{}: bias {} must be (E)", op, bias.str());
  const int64_t E = bias.numel();
  moe::check_experts(E, op);
  check_shape(load, {E}, "moe_bias_update load");
  check_cuda(bias, op, "bias");
  check_dtype(bias, DType::f32, op, "bias");
  check_cuda(load, op, "load");
  check_dtype(load, DType::f32, op, "load");
  bias_update_kernel<<<1, kThreads, 0, st.stream>>>(static_cast<float*>(bias.data),
                                                    static_cast<const float*>(load.data),
                                                    static_cast<int>(E), rate);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
