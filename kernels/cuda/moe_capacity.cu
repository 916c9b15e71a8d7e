// Shared expert capacity on the GPU (kernels/moe_capacity.h), integer for
// integer with the CPU op. moe_run_loads: one block per run, a shared-memory
// histogram (integer atomics: the counts do not depend on order).
// moe_capacity_taken: one thread per expert walks the runs in token order;
// there are a few per sharing rank, so this is a short serial loop.
#include "kernels/cuda/moe_common.cuh"
#include "kernels/moe_capacity.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

// A run outside [0, N) rows is cut to the rows that exist: the table is built
// by the layer, and the CPU op refuses a bad one; here only bounds matter.
__global__ void run_loads_kernel(const int32_t* idx, int64_t N, int64_t K, const int32_t* runs,
                                 int E, int32_t* loads) {
  extern __shared__ int32_t hist[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t r = blockIdx.x;
  int64_t first = runs[2 * r], last = first + runs[2 * r + 1];
  first = first < 0 ? 0 : (first > N ? N : first);
  last = last < first ? first : (last > N ? N : last);
  for (int64_t a = first * K + threadIdx.x; a < last * K; a += blockDim.x) {
    const int32_t e = idx[a];
    if (e >= 0 && e < E) atomicAdd(&hist[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) loads[r * E + e] = hist[e];
}

__global__ void capacity_taken_kernel(const int32_t* loads, int64_t P, int E, const int32_t* order,
                                      int64_t Q, int64_t capacity, int32_t* taken) {
  const int e = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (e >= E) return;
  int64_t before = 0, kept = 0;
  for (int64_t q = 0; q < Q; ++q) {
    const int64_t row = order[2 * q];
    if (row < 0 || row >= P) continue;
    const int64_t load = loads[row * E + e];
    if (order[2 * q + 1]) {
      const int64_t room = capacity - before;
      kept += room < 0 ? 0 : (room > load ? load : room);
    }
    before += load;
  }
  taken[e] = static_cast<int32_t>(capacity - kept);
}

}  // namespace

void moe_run_loads(Context& ctx, Tensor loads, Tensor topk_idx, Tensor runs) {
  const char* op = "moe_run_loads";
  CudaState& st = state_of(ctx);
  const auto [N, K, R, E] = check_run_loads_shapes(loads, topk_idx, runs);
  moe::check_experts(E, op);
  moe::check_i32_arg(loads, op, "loads");
  moe::check_i32_arg(topk_idx, op, "topk_idx");
  moe::check_i32_arg(runs, op, "runs");
  TRAINER_CHECK(R < (int64_t{1} << 31), "{}: {} runs exceed a grid", op, R);
  if (R == 0) return;
  run_loads_kernel<<<static_cast<unsigned>(R), kThreads, E * sizeof(int32_t), st.stream>>>(
      static_cast<const int32_t*>(topk_idx.data), N, K, static_cast<const int32_t*>(runs.data),
      static_cast<int>(E), static_cast<int32_t*>(loads.data));
  CUDA_LAUNCH_CHECK();
}

void moe_capacity_taken(Context& ctx, Tensor taken, Tensor all_loads, Tensor order,
                        int64_t capacity) {
  const char* op = "moe_capacity_taken";
  CudaState& st = state_of(ctx);
  const auto [P, E, Q] = check_capacity_taken_shapes(taken, all_loads, order, capacity);
  moe::check_experts(E, op);
  moe::check_i32_arg(taken, op, "taken");
  moe::check_i32_arg(all_loads, op, "all_loads");
  moe::check_i32_arg(order, op, "order");
  capacity_taken_kernel<<<grid_for(E, kThreads), kThreads, 0, st.stream>>>(
      static_cast<const int32_t*>(all_loads.data), P, static_cast<int>(E),
      static_cast<const int32_t*>(order.data), Q, capacity, static_cast<int32_t*>(taken.data));
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
