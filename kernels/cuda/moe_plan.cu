// moe_plan (kernels/moe_routing.h): the dispatch plan as the CPU op's counting
// sort builds it, integer for integer. A stable cub radix sort of the assignments
// by expert (values: the assignment index a = n * K + k) puts each expert's
// assignments in token order, as the CPU's single pass over a does; a histogram
// gives the loads, one block scans loads and capped loads over the experts, and
// each sorted position then knows its rank within its expert: kept when the rank
// is below the expert's capacity, dropped otherwise. Integer atomics only in the
// histogram, whose sums do not depend on order.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>

#include "kernels/cuda/moe_common.cuh"
#include "kernels/moe_routing.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024, kScanItems = 4;
static_assert(kScanThreads * kScanItems >= moe::kMaxExperts, "one scan block covers the experts");

constexpr unsigned long long kNoBadExpert = ~0ull;

__global__ void plan_iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

// load[e] += this block's count of expert e (load zeroed before). An expert
// outside [0, E) is not counted; the lowest such assignment and its value go to
// *bad (assignment in the high word, so atomicMin keeps the first).
__global__ void plan_count_kernel(const int32_t* idx, int64_t M, int E, int32_t* load,
                                  unsigned long long* bad) {
  extern __shared__ int32_t hist[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  for (int64_t a = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; a < M;
       a += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t e = idx[a];
    if (e >= 0 && e < E)
      atomicAdd(&hist[e], 1);
    else
      atomicMin(bad, (static_cast<unsigned long long>(a) << 32) | static_cast<uint32_t>(e));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    if (hist[e] != 0) atomicAdd(&load[e], hist[e]);
}

// One block: kept[e] (the CPU's rule), start[e] = where expert e's run begins in
// the sorted assignments, out_start[e] = its first slot, *total = slots used.
__global__ void __launch_bounds__(kScanThreads)
    plan_offsets_kernel(const int32_t* load, const int32_t* taken, int64_t capacity, int E,
                        int32_t* kept, int32_t* start, int32_t* out_start, int32_t* total) {
  using Scan = cub::BlockScan<int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  int32_t ld[kScanItems], kp[kScanItems], ld_start[kScanItems], kp_start[kScanItems];
  for (int j = 0; j < kScanItems; ++j) {
    const int e = threadIdx.x * kScanItems + j;
    ld[j] = e < E ? load[e] : 0;
    const int64_t left = capacity - (taken && e < E ? taken[e] : 0);
    const int64_t room = left > 0 ? left : 0;
    kp[j] = capacity > 0 && room < ld[j] ? static_cast<int32_t>(room) : ld[j];
  }
  int32_t ld_total, kp_total;
  Scan(temp).ExclusiveSum(ld, ld_start, ld_total);
  __syncthreads();  // temp is reused
  Scan(temp).ExclusiveSum(kp, kp_start, kp_total);
  for (int j = 0; j < kScanItems; ++j) {
    const int e = threadIdx.x * kScanItems + j;
    if (e >= E) break;
    kept[e] = kp[j];
    start[e] = ld_start[j];
    out_start[e] = kp_start[j];
  }
  if (threadIdx.x == 0) *total = kp_total;
}

// Sorted position i holds assignment a of expert e, the r-th of that expert in
// token order. Also clears the slots past the kept ones. Every a appears once in
// sorted_a and every slot below total comes from exactly one (e, r), so each
// output element has one writer. With an out-of-range expert in the input (the
// launcher throws after this) the sort is meaningless but every index stays in bounds.
__global__ void plan_place_kernel(const uint32_t* sorted_e, const int32_t* sorted_a, int64_t M,
                                  int E, const int32_t* start, const int32_t* out_start,
                                  const int32_t* kept, const int32_t* total, int32_t* slot_src,
                                  int32_t* assign_slot) {
  const int64_t used = *total;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < M;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t e = sorted_e[i];
    const int32_t a = sorted_a[i];
    int32_t slot = -1;
    if (e < static_cast<uint32_t>(E)) {
      const int64_t r = i - start[e];
      if (r >= 0 && r < kept[e]) {
        slot = static_cast<int32_t>(out_start[e] + r);
        slot_src[slot] = a;
      }
    }
    assign_slot[a] = slot;
    if (i >= used) slot_src[i] = -1;
  }
}

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

void moe_plan(Context& ctx, Tensor slot_src, Tensor assign_slot, Tensor load, Tensor kept,
              Tensor topk_idx, int64_t capacity, Tensor taken) {
  const char* op = "moe_plan";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(topk_idx.ndim == 2 && load.ndim == 1, "{}: topk_idx {} must be 2-D, load {} 1-D",
                op, topk_idx.str(), load.str());
  const int64_t N = topk_idx.size(0), K = topk_idx.size(-1), E = load.size(0), M = N * K;
  check_shape(slot_src, {M}, "moe_plan slot_src");
  check_shape(assign_slot, {M}, "moe_plan assign_slot");
  check_shape(kept, {E}, "moe_plan kept");
  moe::check_i32_arg(topk_idx, op, "topk_idx");
  moe::check_i32_arg(slot_src, op, "slot_src");
  moe::check_i32_arg(assign_slot, op, "assign_slot");
  moe::check_i32_arg(load, op, "load");
  moe::check_i32_arg(kept, op, "kept");
  if (!taken.empty()) {
    check_shape(taken, {E}, "moe_plan taken");
    moe::check_i32_arg(taken, op, "taken");
  }
  TRAINER_CHECK(E <= moe::kMaxExperts, "{}: {} experts; the CUDA plan takes at most {}", op, E,
                moe::kMaxExperts);
  // Slots and assignments are i32 and the sort counts items in int.
  TRAINER_CHECK(M < (int64_t{1} << 31), "{}: {} assignments exceed i32 indices", op, M);
  if (M == 0) {  // no assignments: every count is 0 (capacity or not)
    if (E > 0) {
      CUDA_CHECK(cudaMemsetAsync(load.data, 0, E * sizeof(int32_t), st.stream));
      CUDA_CHECK(cudaMemsetAsync(kept.data, 0, E * sizeof(int32_t), st.stream));
    }
    return;
  }
  TRAINER_CHECK(E >= 1, "{}: {} assignments but no experts", op, M);
  const int m = static_cast<int>(M);
  int end_bit = 1;
  while ((int64_t{1} << end_bit) < E) ++end_bit;

  size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), m, 0, end_bit,
      st.stream));
  // Scratch, each part 256-byte aligned: sorted experts, assignment indices in
  // and sorted, run starts, slot starts, the slot total, the bad-expert record,
  // then cub's storage.
  const size_t ints = round_up(M * sizeof(int32_t)), experts = round_up(E * sizeof(int32_t));
  const size_t bytes = moe_plan_scratch_bytes(M, E);
  TRAINER_CHECK(3 * ints + 2 * experts + 2 * 256 + sort_bytes <= bytes,
                "{}: cub's sort of {} assignments needs {} bytes, over the {} planned "
                "(op_scratch.cpp)", op, M, sort_bytes, bytes - (3 * ints + 2 * experts + 2 * 256));
  auto* base = static_cast<unsigned char*>(scratch(st, bytes, op));
  auto* sorted_e = reinterpret_cast<uint32_t*>(base);
  auto* iota = reinterpret_cast<int32_t*>(base + ints);
  auto* sorted_a = reinterpret_cast<int32_t*>(base + 2 * ints);
  auto* start = reinterpret_cast<int32_t*>(base + 3 * ints);
  auto* out_start = reinterpret_cast<int32_t*>(base + 3 * ints + experts);
  auto* total = reinterpret_cast<int32_t*>(base + 3 * ints + 2 * experts);
  auto* bad = reinterpret_cast<unsigned long long*>(base + 3 * ints + 2 * experts + 256);
  void* sort_temp = base + 3 * ints + 2 * experts + 2 * 256;

  const auto* idx = static_cast<const int32_t*>(topk_idx.data);
  CUDA_CHECK(cudaMemsetAsync(load.data, 0, E * sizeof(int32_t), st.stream));  // counted into
  CUDA_CHECK(cudaMemsetAsync(bad, 0xFF, sizeof(*bad), st.stream));
  const unsigned count_blocks = grid_for(M, kThreads, 4 * std::max(st.num_sms, 1));
  plan_count_kernel<<<count_blocks, kThreads, E * sizeof(int32_t), st.stream>>>(
      idx, M, static_cast<int>(E), static_cast<int32_t*>(load.data), bad);
  CUDA_LAUNCH_CHECK();
  plan_iota_kernel<<<grid_for(M, kThreads), kThreads, 0, st.stream>>>(iota, M);
  CUDA_LAUNCH_CHECK();
  // Keys as unsigned: a valid expert's bits are the same, and the sort needs only
  // the low end_bit bits of them.
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes,
                                             reinterpret_cast<const uint32_t*>(idx), sorted_e,
                                             static_cast<const int32_t*>(iota), sorted_a, m, 0,
                                             end_bit, st.stream));
  plan_offsets_kernel<<<1, kScanThreads, 0, st.stream>>>(
      static_cast<const int32_t*>(load.data),
      taken.empty() ? nullptr : static_cast<const int32_t*>(taken.data), capacity,
      static_cast<int>(E), static_cast<int32_t*>(kept.data), start, out_start, total);
  CUDA_LAUNCH_CHECK();
  plan_place_kernel<<<grid_for(M, kThreads), kThreads, 0, st.stream>>>(
      sorted_e, sorted_a, M, static_cast<int>(E), start, out_start,
      static_cast<const int32_t*>(kept.data), total, static_cast<int32_t*>(slot_src.data),
      static_cast<int32_t*>(assign_slot.data));
  CUDA_LAUNCH_CHECK();

  // The CPU op refuses an expert outside [0, E); so does this one, which costs a
  // stream sync (8 bytes back). The engine turns it off (check_index_operands):
  // its top-k comes from moe_route_forward, in range by construction, and with
  // a bad expert the kernels above still stay in bounds.
  if (!st.check_index_operands) return;
  unsigned long long first_bad = kNoBadExpert;
  CUDA_CHECK(cudaMemcpyAsync(&first_bad, bad, sizeof(first_bad), cudaMemcpyDeviceToHost,
                             st.stream));
  CUDA_CHECK(cudaStreamSynchronize(st.stream));
  TRAINER_CHECK(first_bad == kNoBadExpert, "{}: expert {} out of range {} (assignment {})", op,
                static_cast<int32_t>(static_cast<uint32_t>(first_bad & 0xFFFFFFFFu)), E,
                first_bad >> 32);
}

}  // namespace trainer::cuda
