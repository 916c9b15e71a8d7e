// MoE gather / combine and their backwards (kernels/moe_routing.h): row copies
// and weighted row sums through the plan's slot_src / assign_slot. Deterministic
// without float atomics: each output element has one thread, which adds a
// token's K slots in k order as the CPU op does, with separately rounded
// multiplies and adds (__fmul_rn / __fadd_rn: no FMA contraction), so fp32
// results match the CPU op bit for bit. The K-weight gradient is one warp per
// assignment, a double dot product reduced in a fixed order.
//
// Two kernels per op: a packed one (16-byte loads and stores, one template per
// dtype) when the op's activation tensors share a dtype, every base pointer is
// 16-byte aligned and C is a whole number of packs; otherwise an element-wise
// one that reads each argument's dtype at run time (fp32/bf16/fp16 in any mix,
// as the CPU op takes them). Combine weights are always read that way (K per
// token). Slot and assignment indices outside their range, which the CPU op
// would read out of bounds for, count as unused here.
#include <algorithm>

#include "kernels/cuda/moe_common.cuh"
#include "kernels/moe_routing.h"

namespace trainer::cuda {
namespace {

using moe::AnyFloat;
using moe::Pack;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

template <class T>
__device__ __forceinline__ Pack<T> zero_pack() {
  Pack<T> p;
#pragma unroll
  for (int j = 0; j < Pack<T>::kN; ++j) p.v[j] = from_float<T>(0.0f);
  return p;
}

// ---- gather: out (S, C) row s = inp row src[s] / K, zeros for an unused slot.

template <class T>
__global__ void gather_packed_kernel(Pack<T>* out, const Pack<T>* inp, const int32_t* src,
                                     int64_t S, int64_t P, int64_t N, int64_t K) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < S * P;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = i / P, c = i - s * P;
    const int64_t n = src[s] >= 0 ? src[s] / K : N;
    out[i] = n < N ? inp[n * P + c] : zero_pack<T>();
  }
}

__global__ void gather_any_kernel(AnyFloat out, AnyFloat inp, const int32_t* src, int64_t S,
                                  int64_t C, int64_t N, int64_t K) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < S * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = i / C, c = i - s * C;
    const int64_t n = src[s] >= 0 ? src[s] / K : N;
    out.store(i, n < N ? inp.load(n * C + c) : 0.0f);
  }
}

// ---- slot sums: out (N, C) += the rows (S, C) of token n's kept slots in k order,
// each times its combine weight (moe_combine) or as they are (moe_gather_backward,
// the CPU's plain sum: kWeighted false never multiplies).

template <bool kWeighted, class T>
__global__ void sum_slots_packed_kernel(Pack<T>* out, const Pack<T>* rows, const int32_t* slot,
                                        AnyFloat weight, int64_t N, int64_t P, int64_t K) {
  const int64_t S = N * K;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * P;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / P, c = i - n * P;
    Pack<T> x = out[i];
    float acc[Pack<T>::kN];
#pragma unroll
    for (int j = 0; j < Pack<T>::kN; ++j) acc[j] = to_float(x.v[j]);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t s = slot[n * K + k];
      if (s < 0 || s >= S) continue;
      const Pack<T> y = rows[s * P + c];
      if constexpr (kWeighted) {
        const float w = weight.load(n * K + k);
#pragma unroll
        for (int j = 0; j < Pack<T>::kN; ++j)
          acc[j] = __fadd_rn(acc[j], __fmul_rn(w, to_float(y.v[j])));
      } else {
#pragma unroll
        for (int j = 0; j < Pack<T>::kN; ++j) acc[j] = __fadd_rn(acc[j], to_float(y.v[j]));
      }
    }
#pragma unroll
    for (int j = 0; j < Pack<T>::kN; ++j) x.v[j] = from_float<T>(acc[j]);
    out[i] = x;
  }
}

template <bool kWeighted>
__global__ void sum_slots_any_kernel(AnyFloat out, AnyFloat rows, const int32_t* slot,
                                     AnyFloat weight, int64_t N, int64_t C, int64_t K) {
  const int64_t S = N * K;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i - n * C;
    float acc = out.load(i);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t s = slot[n * K + k];
      if (s < 0 || s >= S) continue;
      const float y = rows.load(s * C + c);
      acc = __fadd_rn(acc, kWeighted ? __fmul_rn(weight.load(n * K + k), y) : y);
    }
    out.store(i, acc);
  }
}

// ---- combine backward, expert side: dexpert_out (S, C) row s = weight[a] * dout
// row a / K for the slot's assignment a, zeros for an unused slot.

template <class T>
__global__ void combine_backward_rows_packed_kernel(Pack<T>* dexpert_out, const Pack<T>* dout,
                                                    const int32_t* src, AnyFloat weight,
                                                    int64_t N, int64_t P, int64_t K) {
  const int64_t S = N * K;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < S * P;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = i / P, c = i - s * P;
    const int32_t a = src[s];
    if (a < 0 || a >= S) {
      dexpert_out[i] = zero_pack<T>();
      continue;
    }
    const float w = weight.load(a);
    const Pack<T> g = dout[(a / K) * P + c];
    Pack<T> d;
#pragma unroll
    for (int j = 0; j < Pack<T>::kN; ++j) d.v[j] = from_float<T>(__fmul_rn(w, to_float(g.v[j])));
    dexpert_out[i] = d;
  }
}

__global__ void combine_backward_rows_any_kernel(AnyFloat dexpert_out, AnyFloat dout,
                                                 const int32_t* src, AnyFloat weight, int64_t N,
                                                 int64_t C, int64_t K) {
  const int64_t S = N * K;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < S * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = i / C, c = i - s * C;
    const int32_t a = src[s];
    dexpert_out.store(i, a >= 0 && a < S
                             ? __fmul_rn(weight.load(a), dout.load((a / K) * C + c))
                             : 0.0f);
  }
}

// ---- combine backward, weight side: dtopk_weight[a] = dout row a / K . expert_out
// row of a's slot (0 when dropped), one warp per assignment, in double.

template <class T>
__global__ void combine_backward_weight_packed_kernel(AnyFloat dweight, const Pack<T>* dout,
                                                      const Pack<T>* expert_out,
                                                      const int32_t* slot, int64_t N, int64_t P,
                                                      int64_t K) {
  const int lane = threadIdx.x % 32;
  const int64_t S = N * K;
  for (int64_t a = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; a < S;
       a += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int32_t s = slot[a];
    double dot = 0.0;
    if (s >= 0 && s < S) {
      const Pack<T>* g = dout + (a / K) * P;
      const Pack<T>* y = expert_out + s * P;
      for (int64_t c = lane; c < P; c += 32) {
        const Pack<T> gc = g[c], yc = y[c];
#pragma unroll
        for (int j = 0; j < Pack<T>::kN; ++j)
          dot += static_cast<double>(to_float(gc.v[j])) * to_float(yc.v[j]);
      }
    }
    dot = moe::warp_sum_double(dot);
    if (lane == 0) dweight.store(a, static_cast<float>(dot));
  }
}

__global__ void combine_backward_weight_any_kernel(AnyFloat dweight, AnyFloat dout,
                                                   AnyFloat expert_out, const int32_t* slot,
                                                   int64_t N, int64_t C, int64_t K) {
  const int lane = threadIdx.x % 32;
  const int64_t S = N * K;
  for (int64_t a = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; a < S;
       a += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int32_t s = slot[a];
    double dot = 0.0;
    if (s >= 0 && s < S) {
      const int64_t g = (a / K) * C, y = static_cast<int64_t>(s) * C;
      for (int64_t c = lane; c < C; c += 32)
        dot += static_cast<double>(dout.load(g + c)) * expert_out.load(y + c);
    }
    dot = moe::warp_sum_double(dot);
    if (lane == 0) dweight.store(a, static_cast<float>(dot));
  }
}

// ---- launch helpers

// Packs per row when every tensor shares `dtype`, is 16-byte aligned and a row of
// C elements is a whole number of packs; 0 otherwise (the element-wise kernel).
int64_t packs_per_row(int64_t C, std::initializer_list<const Tensor*> rows) {
  const DType dtype = (*rows.begin())->dtype;
  const int64_t per_pack = 16 / static_cast<int64_t>(dtype_size(dtype));
  if (C % per_pack != 0) return 0;
  for (const Tensor* t : rows)
    if (t->dtype != dtype || !moe::aligned16(*t)) return 0;
  return C / per_pack;
}

unsigned warp_blocks(int64_t rows) {
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

template <class T>
Pack<T>* packs(const Tensor& t) {
  return static_cast<Pack<T>*>(t.data);
}

// out (N, C) += the slot rows (S, C) of each token, weighted or not (the
// sum_slots kernels), packed when the two share a dtype and alignment allows.
template <bool kWeighted>
void sum_slots(CudaState& st, const char* op, Tensor out, Tensor rows, const int32_t* slot,
               AnyFloat weight, int64_t N, int64_t C, int64_t K) {
  if (const int64_t P = packs_per_row(C, {&out, &rows})) {
    TRAINER_FLOAT_DISPATCH(out.dtype, op, {
      sum_slots_packed_kernel<kWeighted, T><<<grid_for(N * P, kThreads), kThreads, 0, st.stream>>>(
          packs<T>(out), packs<T>(rows), slot, weight, N, P, K);
    });
  } else {
    sum_slots_any_kernel<kWeighted><<<grid_for(N * C, kThreads), kThreads, 0, st.stream>>>(
        moe::any_float(out, op, "out"), moe::any_float(rows, op, "rows"), slot, weight, N, C, K);
  }
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void moe_gather(Context& ctx, Tensor out, Tensor inp, Tensor slot_src, int64_t top_k) {
  const char* op = "moe_gather";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(out.ndim == 2 && inp.ndim == 2, "{}: out {} and inp {} must be 2-D", op,
                out.str(), inp.str());
  const int64_t S = out.size(0), C = out.size(-1), N = inp.size(0);
  check_shape(inp, {N, C}, "moe_gather inp");
  check_shape(slot_src, {S}, "moe_gather slot_src");
  TRAINER_CHECK(top_k >= 1, "{}: top_k {} must be at least 1", op, top_k);
  moe::check_float_arg(out, op, "out");
  moe::check_float_arg(inp, op, "inp");
  moe::check_i32_arg(slot_src, op, "slot_src");
  if (S * C == 0) return;
  const auto* src = static_cast<const int32_t*>(slot_src.data);
  if (const int64_t P = packs_per_row(C, {&out, &inp})) {
    TRAINER_FLOAT_DISPATCH(out.dtype, op, {
      gather_packed_kernel<T><<<grid_for(S * P, kThreads), kThreads, 0, st.stream>>>(
          packs<T>(out), packs<T>(inp), src, S, P, N, top_k);
    });
  } else {
    gather_any_kernel<<<grid_for(S * C, kThreads), kThreads, 0, st.stream>>>(
        moe::any_float(out, op, "out"), moe::any_float(inp, op, "inp"), src, S, C, N, top_k);
  }
  CUDA_LAUNCH_CHECK();
}

void moe_gather_backward(Context& ctx, Tensor dinp, Tensor dout, Tensor assign_slot) {
  const char* op = "moe_gather_backward";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(dinp.ndim == 2 && dout.ndim == 2, "{}: dinp {} and dout {} must be 2-D", op,
                dinp.str(), dout.str());
  const int64_t N = dinp.size(0), C = dinp.size(-1), S = dout.size(0);
  moe::check_float_arg(dinp, op, "dinp");
  moe::check_float_arg(dout, op, "dout");
  moe::check_i32_arg(assign_slot, op, "assign_slot");
  if (N == 0) return;  // nothing to accumulate into (and K = S / N undefined)
  const int64_t K = S / N;
  check_shape(dout, {N * K, C}, "moe_gather_backward dout");
  check_shape(assign_slot, {N * K}, "moe_gather_backward assign_slot");
  if (N * C == 0 || K == 0) return;
  const auto* slot = static_cast<const int32_t*>(assign_slot.data);
  sum_slots<false>(st, op, dinp, dout, slot, AnyFloat{}, N, C, K);
}

void moe_combine(Context& ctx, Tensor out, Tensor expert_out, Tensor assign_slot,
                 Tensor topk_weight) {
  const char* op = "moe_combine";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(out.ndim == 2 && topk_weight.ndim == 2, "{}: out {} and topk_weight {} must be 2-D",
                op, out.str(), topk_weight.str());
  const int64_t N = out.size(0), C = out.size(-1), K = topk_weight.size(-1);
  check_shape(expert_out, {N * K, C}, "moe_combine expert_out");
  check_shape(assign_slot, {N * K}, "moe_combine assign_slot");
  check_shape(topk_weight, {N, K}, "moe_combine topk_weight");
  moe::check_float_arg(out, op, "out");
  moe::check_float_arg(expert_out, op, "expert_out");
  moe::check_float_arg(topk_weight, op, "topk_weight");
  moe::check_i32_arg(assign_slot, op, "assign_slot");
  if (N * C == 0 || K == 0) return;
  const auto* slot = static_cast<const int32_t*>(assign_slot.data);
  sum_slots<true>(st, op, out, expert_out, slot, moe::any_float(topk_weight, op, "topk_weight"),
                 N, C, K);
}

void moe_combine_backward(Context& ctx, Tensor dexpert_out, Tensor dtopk_weight, Tensor dout,
                          Tensor expert_out, Tensor assign_slot, Tensor slot_src,
                          Tensor topk_weight) {
  const char* op = "moe_combine_backward";
  CudaState& st = state_of(ctx);
  TRAINER_CHECK(dout.ndim == 2 && topk_weight.ndim == 2,
                "{}: dout {} and topk_weight {} must be 2-D", op, dout.str(), topk_weight.str());
  const int64_t N = dout.size(0), C = dout.size(-1), K = topk_weight.size(-1);
  check_shape(dexpert_out, {N * K, C}, "moe_combine_backward dexpert_out");
  check_shape(expert_out, {N * K, C}, "moe_combine_backward expert_out");
  check_shape(dtopk_weight, {N, K}, "moe_combine_backward dtopk_weight");
  check_shape(assign_slot, {N * K}, "moe_combine_backward assign_slot");
  check_shape(slot_src, {N * K}, "moe_combine_backward slot_src");
  check_shape(topk_weight, {N, K}, "moe_combine_backward topk_weight");
  moe::check_float_arg(dexpert_out, op, "dexpert_out");
  moe::check_float_arg(dtopk_weight, op, "dtopk_weight");
  moe::check_float_arg(dout, op, "dout");
  moe::check_float_arg(expert_out, op, "expert_out");
  moe::check_float_arg(topk_weight, op, "topk_weight");
  moe::check_i32_arg(assign_slot, op, "assign_slot");
  moe::check_i32_arg(slot_src, op, "slot_src");
  const int64_t S = N * K;
  if (S == 0) return;
  const auto* slot = static_cast<const int32_t*>(assign_slot.data);
  const auto* src = static_cast<const int32_t*>(slot_src.data);
  const AnyFloat w = moe::any_float(topk_weight, op, "topk_weight");
  const AnyFloat dw = moe::any_float(dtopk_weight, op, "dtopk_weight");
  // dtopk_weight is written even when C = 0 (every dot product is 0).
  if (const int64_t P = C > 0 ? packs_per_row(C, {&dexpert_out, &dout, &expert_out}) : 0) {
    TRAINER_FLOAT_DISPATCH(dout.dtype, op, {
      combine_backward_rows_packed_kernel<T>
          <<<grid_for(S * P, kThreads), kThreads, 0, st.stream>>>(packs<T>(dexpert_out),
                                                                  packs<T>(dout), src, w, N, P, K);
      CUDA_LAUNCH_CHECK();
      combine_backward_weight_packed_kernel<T><<<warp_blocks(S), kThreads, 0, st.stream>>>(
          dw, packs<T>(dout), packs<T>(expert_out), slot, N, P, K);
    });
  } else {
    const AnyFloat g = moe::any_float(dout, op, "dout");
    if (C > 0) {
      combine_backward_rows_any_kernel<<<grid_for(S * C, kThreads), kThreads, 0, st.stream>>>(
          moe::any_float(dexpert_out, op, "dexpert_out"), g, src, w, N, C, K);
      CUDA_LAUNCH_CHECK();
    }
    combine_backward_weight_any_kernel<<<warp_blocks(S), kThreads, 0, st.stream>>>(
        dw, g, moe::any_float(expert_out, op, "expert_out"), slot, N, C, K);
  }
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
