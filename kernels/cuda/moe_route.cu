// MoE router ops (kernels/moe_routing.h): scores, top-k and their backward, one
// warp per token row with the row's fp32 scores in shared memory. Built to give
// the CPU op's top-k exactly, since a different expert choice is not a rounding
// error: the probabilities are computed as the CPU computes them (exp in double,
// rounded to fp32, which is what glibc's expf returns; softmax sums in double),
// the selection sees the fp32 probabilities before they are rounded into `probs`,
// and the warp's argmax uses the CPU loop's order (ties to the lower index, a
// NaN only wins as the first candidate). Float arguments fp32/bf16/fp16, each
// independently, as on the CPU.
#include <algorithm>
#include <limits>

#include "kernels/cuda/moe_common.cuh"
#include "kernels/moe_routing.h"

namespace trainer::cuda {
namespace {

using moe::AnyFloat;

constexpr int kMaxWarps = 8;
constexpr size_t kSharedLimit = 48 * 1024;  // without the opt-in attribute

__device__ __forceinline__ float exp_as_cpu(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

// Does candidate (v, e) come before (bv, be) in the CPU's scan? The CPU keeps its
// first candidate and replaces it only by a strictly larger value, so among
// numbers the larger wins, equal values go to the lower index, and a NaN never
// replaces anything; the one case this order does not cover (a NaN as the
// first candidate, which nothing then replaces) the caller handles.
__device__ __forceinline__ bool before(float v, int e, float bv, int be) {
  const bool vn = isnan(v), bn = isnan(bv);
  if (vn != bn) return bn;
  if (!vn && v != bv) return v > bv;
  return e < be;
}

// Group-limited routing (RouteGroups): the lanes score the groups, lane 0
// picks the best ones, both with the CPU op's functions (kernels/moe_routing.h),
// then the experts of the other groups are ruled out (rank -1).
__device__ void exclude_groups(const float* key, int* rank, float* score, int* allowed, int E,
                               int groups, int top, int lane) {
  const int size = E / groups;
  for (int q = lane; q < groups; q += 32) score[q] = route_group_score(key + q * size, size);
  __syncwarp();
  if (lane == 0) route_pick_groups(allowed, score, groups, top);
  __syncwarp();
  for (int e = lane; e < E; e += 32)
    if (!allowed[e / size]) rank[e] = -1;
  __syncwarp();
}

// Shared memory per warp: p[E] (fp32 scores), key[E] (p + bias), rank[E] (k + 1
// once chosen, -1 when its group is ruled out, else 0); with route groups
// score[G] and allowed[G].
__global__ void route_forward_kernel(AnyFloat probs, int32_t* topk_idx, AnyFloat weight,
                                     AnyFloat logits, AnyFloat bias, int64_t N, int E, int K,
                                     bool sigmoid, bool normalize, int groups, int top_groups) {
  extern __shared__ float route_smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int G = groups > 1 ? groups : 0;
  float* p = route_smem + static_cast<size_t>(warp) * (3 * E + 2 * G);
  float* key = p + E;
  int* rank = reinterpret_cast<int*>(key + E);
  float* group_score = reinterpret_cast<float*>(rank + E);
  int* group_allowed = reinterpret_cast<int*>(group_score + G);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * warps + warp; n < N;
       n += static_cast<int64_t>(gridDim.x) * warps) {
    const int64_t row = n * E;
    if (sigmoid) {
      for (int e = lane; e < E; e += 32) p[e] = 1.0f / (1.0f + exp_as_cpu(-logits.load(row + e)));
    } else {
      float m = -INFINITY;
      for (int e = lane; e < E; e += 32) m = fmaxf(m, logits.load(row + e));
      m = warp_max(m);
      double sum = 0.0;
      for (int e = lane; e < E; e += 32) {
        p[e] = exp_as_cpu(logits.load(row + e) - m);
        sum += p[e];
      }
      sum = moe::warp_sum_double(sum);
      const float inv = static_cast<float>(1.0 / sum);
      for (int e = lane; e < E; e += 32) p[e] *= inv;
    }
    for (int e = lane; e < E; e += 32) {
      probs.store(row + e, p[e]);
      key[e] = p[e] + (bias.data ? bias.load(e) : 0.0f);
      rank[e] = 0;
    }
    __syncwarp();
    if (G > 0) exclude_groups(key, rank, group_score, group_allowed, E, G, top_groups, lane);
    double chosen_sum = 0.0;
    for (int k = 0; k < K; ++k) {
      float bv = 0.0f;
      int be = -1, first = E;  // best candidate; lowest unchosen expert
      for (int e = lane; e < E; e += 32) {
        if (rank[e]) continue;
        if (first == E) first = e;
        if (be < 0 || before(key[e], e, bv, be)) bv = key[e], be = e;
      }
      for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oe = __shfl_xor_sync(0xffffffffu, be, off);
        first = min(first, __shfl_xor_sync(0xffffffffu, first, off));
        if (oe >= 0 && (be < 0 || before(ov, oe, bv, be))) bv = ov, be = oe;
      }
      if (isnan(key[first])) be = first;
      chosen_sum += p[be];
      __syncwarp();  // every lane has read rank[] for this k
      if (lane == 0) rank[be] = k + 1;
      __syncwarp();
    }
    const float inv = static_cast<float>(1.0 / chosen_sum);
    for (int e = lane; e < E; e += 32) {
      const int r = rank[e];
      if (r <= 0) continue;
      topk_idx[n * K + r - 1] = e;
      weight.store(n * K + r - 1, normalize ? p[e] * inv : p[e]);
    }
    __syncwarp();  // the next row overwrites this warp's shared rows
  }
}

// Shared memory per warp: p[E] (the probs as stored), d[E] (d probs, then d logits).
__global__ void route_backward_kernel(AnyFloat dlogits, AnyFloat dweight, AnyFloat logits,
                                      AnyFloat probs, const int32_t* topk_idx, float z_grad,
                                      int64_t N, int E, int K, bool sigmoid, bool normalize) {
  extern __shared__ float route_smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float* p = route_smem + static_cast<size_t>(warp) * 2 * E;
  float* d = p + E;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * warps + warp; n < N;
       n += static_cast<int64_t>(gridDim.x) * warps) {
    const int64_t row = n * E;
    const int32_t* idx = topk_idx + n * K;
    for (int e = lane; e < E; e += 32) {
      p[e] = probs.load(row + e);
      d[e] = 0.0f;
    }
    __syncwarp();
    // The combine weights' term, in k order on one lane as the CPU adds it (an
    // expert listed twice adds twice). The CPU op reads out of bounds for an index
    // outside [0, E); here such an entry is skipped.
    if (lane == 0) {
      if (normalize) {
        double S = 0.0, gw = 0.0;
        for (int k = 0; k < K; ++k)
          if (idx[k] >= 0 && idx[k] < E) S += p[idx[k]];
        for (int k = 0; k < K; ++k)
          if (idx[k] >= 0 && idx[k] < E)
            gw += static_cast<double>(dweight.load(n * K + k)) * p[idx[k]] / S;
        for (int k = 0; k < K; ++k)
          if (idx[k] >= 0 && idx[k] < E)
            d[idx[k]] += static_cast<float>((dweight.load(n * K + k) - gw) / S);
      } else {
        for (int k = 0; k < K; ++k)
          if (idx[k] >= 0 && idx[k] < E) d[idx[k]] += dweight.load(n * K + k);
      }
    }
    __syncwarp();
    if (sigmoid) {
      for (int e = lane; e < E; e += 32) d[e] *= p[e] * (1.0f - p[e]);
    } else {
      double dot = 0.0;
      for (int e = lane; e < E; e += 32) dot += static_cast<double>(p[e]) * d[e];
      const float fdot = static_cast<float>(moe::warp_sum_double(dot));
      for (int e = lane; e < E; e += 32) d[e] = p[e] * (d[e] - fdot);
    }
    if (z_grad != 0.0f) {
      float m = -INFINITY;
      for (int e = lane; e < E; e += 32) m = fmaxf(m, logits.load(row + e));
      m = warp_max(m);
      double sum = 0.0;
      for (int e = lane; e < E; e += 32) sum += exp(static_cast<double>(logits.load(row + e) - m));
      const double lse = m + log(moe::warp_sum_double(sum));
      for (int e = lane; e < E; e += 32)
        d[e] += static_cast<float>(2.0 * z_grad * lse * exp(logits.load(row + e) - lse));
    }
    for (int e = lane; e < E; e += 32) dlogits.store(row + e, d[e]);
    __syncwarp();
  }
}

// Warps per block so that `bytes_per_warp` of shared memory each fits the default
// limit, and a grid of blocks that covers N rows (the kernels loop past it).
struct RowLaunch {
  int warps;
  unsigned blocks;
  size_t smem;
};

RowLaunch row_launch(int64_t N, size_t bytes_per_warp) {
  int64_t warps = std::min<int64_t>(kMaxWarps, static_cast<int64_t>(kSharedLimit / bytes_per_warp));
  warps = std::max<int64_t>(1, std::min<int64_t>(warps, N));
  const int64_t blocks = std::min<int64_t>((N + warps - 1) / warps, int64_t{1} << 20);
  return {static_cast<int>(warps), static_cast<unsigned>(std::max<int64_t>(blocks, 1)),
          static_cast<size_t>(warps) * bytes_per_warp};
}

}  // namespace

void moe_route_forward(Context& ctx, Tensor probs, Tensor topk_idx, Tensor topk_weight,
                       Tensor logits, Tensor select_bias, bool sigmoid, bool normalize,
                       RouteGroups groups) {
  const char* op = "moe_route_forward";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(logits.ndim == 2 && topk_idx.ndim == 2, "{}: logits {} and topk_idx {} must be 2-D",
                op, logits.str(), topk_idx.str());
  const int64_t N = logits.size(0), E = logits.size(-1), K = topk_idx.size(-1);
  check_shape(probs, {N, E}, "moe_route_forward probs");
  check_shape(topk_idx, {N, K}, "moe_route_forward topk_idx");
  check_shape(topk_weight, {N, K}, "moe_route_forward topk_weight");
  TRAINER_CHECK(K >= 1 && K <= E, "{}: top_k {} must be in 1..{}", op, K, E);
  moe::check_experts(E, op);
  check_route_groups(groups, E, K, op);
  const int64_t G = groups.groups > 1 ? groups.groups : 0;
  moe::check_float_arg(logits, op, "logits");
  moe::check_float_arg(probs, op, "probs");
  moe::check_float_arg(topk_weight, op, "topk_weight");
  moe::check_i32_arg(topk_idx, op, "topk_idx");
  if (!select_bias.empty()) {
    check_shape(select_bias, {E}, "moe_route_forward select_bias");
    moe::check_float_arg(select_bias, op, "select_bias");
  }
  if (N == 0) return;
  const size_t per_warp = sizeof(float) * static_cast<size_t>(3 * E + 2 * G);
  TRAINER_CHECK(per_warp <= kSharedLimit, "{}: {} experts in {} route groups need {} bytes of "
                "shared memory per warp, over the {}", op, E, G, per_warp, kSharedLimit);
  const RowLaunch l = row_launch(N, per_warp);
  route_forward_kernel<<<l.blocks, l.warps * 32, l.smem, st.stream>>>(
      moe::any_float(probs, op, "probs"), static_cast<int32_t*>(topk_idx.data),
      moe::any_float(topk_weight, op, "topk_weight"), moe::any_float(logits, op, "logits"),
      moe::any_float(select_bias, op, "select_bias"), N, static_cast<int>(E),
      static_cast<int>(K), sigmoid, normalize, static_cast<int>(G),
      static_cast<int>(groups.top));
  CUDA_LAUNCH_CHECK();
}

void moe_route_backward(Context& ctx, Tensor dlogits, Tensor dtopk_weight, Tensor logits,
                        Tensor probs, Tensor topk_idx, float z_grad, bool sigmoid,
                        bool normalize) {
  const char* op = "moe_route_backward";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(logits.ndim == 2 && topk_idx.ndim == 2, "{}: logits {} and topk_idx {} must be 2-D",
                op, logits.str(), topk_idx.str());
  const int64_t N = logits.size(0), E = logits.size(-1), K = topk_idx.size(-1);
  check_shape(probs, {N, E}, "moe_route_backward probs");
  check_shape(dlogits, {N, E}, "moe_route_backward dlogits");
  check_shape(topk_idx, {N, K}, "moe_route_backward topk_idx");
  check_shape(dtopk_weight, {N, K}, "moe_route_backward dtopk_weight");
  moe::check_experts(E, op);
  TRAINER_CHECK(K <= std::numeric_limits<int>::max(), "{}: top_k {} too large", op, K);
  moe::check_float_arg(dlogits, op, "dlogits");
  moe::check_float_arg(dtopk_weight, op, "dtopk_weight");
  moe::check_float_arg(logits, op, "logits");
  moe::check_float_arg(probs, op, "probs");
  moe::check_i32_arg(topk_idx, op, "topk_idx");
  if (N == 0) return;
  const RowLaunch l = row_launch(N, 2 * sizeof(float) * static_cast<size_t>(E));
  route_backward_kernel<<<l.blocks, l.warps * 32, l.smem, st.stream>>>(
      moe::any_float(dlogits, op, "dlogits"), moe::any_float(dtopk_weight, op, "dtopk_weight"),
      moe::any_float(logits, op, "logits"), moe::any_float(probs, op, "probs"),
      static_cast<const int32_t*>(topk_idx.data), z_grad, N, static_cast<int>(E),
      static_cast<int>(K), sigmoid, normalize);
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
