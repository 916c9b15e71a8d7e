// Token + position embedding forward and deterministic backward (kernels/embedding.h).
// dwte without float atomics: a stable radix sort of (id, token index) groups the
// tokens of each id in token order; one block per group sums its dout rows in that
// order and adds the sum to the row once. Same bits on every run. dwpe with
// explicit positions (packed documents: any token may use any row) goes the
// same way, sorted by position; without them position t's tokens are known.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/index_check.h"
#include "kernels/embedding.h"
#include "kernels/op_scratch.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

// positions: (N) learned position rows, or null for pos_offset + n % T_len.
template <class T>
__global__ void embedding_forward_kernel(T* out, const int32_t* ids, const T* wte, const T* wpe,
                                         const int32_t* positions, int64_t N, int64_t C,
                                         int64_t V_local, int64_t T_len, int64_t pos_offset,
                                         int64_t vocab_start) {
  const int64_t total = N * C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t v = static_cast<int64_t>(ids[n]) - vocab_start;
    float x = (v >= 0 && v < V_local) ? to_float(wte[v * C + c]) : 0.0f;
    if (wpe) {
      const int64_t at = positions ? positions[n] : pos_offset + n % T_len;
      x += to_float(wpe[at * C + c]);
    }
    out[i] = from_float<T>(x);
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

// Block g starts at sorted position g if that begins a run of equal keys (token
// ids, or positions); it sums the run's dout rows (token order, thanks to the
// stable sort) into row key - key_start of the table, if that is one of its rows.
template <class T>
__global__ void embedding_backward_rows_kernel(float* dtable, const T* dout,
                                               const int32_t* sorted_keys,
                                               const int32_t* sorted_tokens, int64_t N, int64_t C,
                                               int64_t rows, int64_t key_start) {
  const int64_t begin = blockIdx.x;
  const int32_t key = sorted_keys[begin];
  if (begin > 0 && sorted_keys[begin - 1] == key) return;  // not the start of a run
  const int64_t v = static_cast<int64_t>(key) - key_start;
  if (v < 0 || v >= rows) return;
  int64_t end = begin + 1;
  while (end < N && sorted_keys[end] == key) ++end;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.0f;
    for (int64_t i = begin; i < end; ++i) s += to_float(dout[static_cast<int64_t>(sorted_tokens[i]) * C + c]);
    dtable[v * C + c] += s;
  }
}

template <class T>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const T* dout, int64_t B, int64_t T_len,
                                              int64_t C, int64_t pos_offset) {
  const int64_t total = T_len * C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / C, c = i % C;
    float s = 0.0f;
    for (int64_t b = 0; b < B; ++b) s += to_float(dout[(b * T_len + t) * C + c]);
    dwpe[(pos_offset + t) * C + c] += s;
  }
}

struct Dims {
  int64_t N, C, V_local;
};

Dims check_args(CudaState& st, const char* op, const Tensor& rows, const Tensor& ids,
                const Tensor& table, const Tensor& pos_table, int64_t T, int64_t pos_offset,
                const Tensor& positions) {
  check_cuda(rows, op, "out/dout");
  check_cuda(ids, op, "ids");
  check_cuda(table, op, "wte/dwte");
  check_dtype(ids, DType::i32, op, "ids");
  TRAINER_CHECK(rows.ndim >= 1 && table.ndim == 2, "{}: rows {} table {}", op, rows.str(),
                table.str());
  const int64_t C = table.shape[1], N = ids.numel();
  TRAINER_CHECK(rows.size(-1) == C && rows.numel() == N * C,
                "{}: rows {} must be ({}, {}) for ids {} and table {}", op, rows.str(), N, C,
                ids.str(), table.str());
  if (!pos_table.empty() && !positions.empty()) {
    check_cuda(pos_table, op, "wpe/dwpe");
    check_cuda(positions, op, "positions");
    check_dtype(positions, DType::i32, op, "positions");
    check_shape(positions, {N}, op);
    TRAINER_CHECK(pos_table.ndim == 2 && pos_table.shape[1] == C,
                  "{}: position table {} must have {} columns", op, pos_table.str(), C);
    TRAINER_CHECK(pos_offset == 0, "{}: positions given with pos_offset {}", op, pos_offset);
    // The CPU op's refusal; the rows read below may then trust the values.
    if (st.check_index_operands) {
      const int64_t T_max = pos_table.shape[0];
      const OutOfRange bad = find_out_of_range(st, static_cast<const int32_t*>(positions.data),
                                               1, N, N, T_max - 1, 0, op);
      TRAINER_CHECK(!bad.found, "{}: position {} of token {} exceeds the {} learned positions",
                    op, bad.value, bad.col, T_max);
    }
  } else if (!pos_table.empty()) {
    TRAINER_CHECK(T > 0 && N % T == 0, "{}: {} tokens are not whole sequences of {}", op, N, T);
    check_cuda(pos_table, op, "wpe/dwpe");
    TRAINER_CHECK(pos_table.ndim == 2 && pos_table.shape[1] == C && pos_offset >= 0 &&
                      pos_offset + T <= pos_table.shape[0],
                  "{}: position table {} cannot hold positions [{}, {})", op, pos_table.str(),
                  pos_offset, pos_offset + T);
  }
  return {N, C, table.shape[0]};
}

}  // namespace

void embedding_forward(Context& ctx, Tensor out, Tensor ids, Tensor wte, Tensor wpe, int64_t T,
                       int64_t pos_offset, int64_t vocab_start, Tensor positions) {
  const char* op = "embedding_forward";
  CudaState& st = state_of(ctx);
  const Dims d = check_args(st, op, out, ids, wte, wpe, T, pos_offset, positions);
  TRAINER_CHECK(out.dtype == wte.dtype && (wpe.empty() || wpe.dtype == wte.dtype),
                "{}: out {}, wte {}, wpe {} must share a dtype", op, out.str(), wte.str(), wpe.str());
  if (d.N * d.C == 0) return;
  const int64_t seq_len = T;  // `T` names the element type inside the dispatch
  TRAINER_FLOAT_DISPATCH(out.dtype, op, {
    embedding_forward_kernel<T><<<grid_for(d.N * d.C, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const int32_t*>(ids.data),
        static_cast<const T*>(wte.data), wpe.empty() ? nullptr : static_cast<const T*>(wpe.data),
        wpe.empty() ? nullptr : static_cast<const int32_t*>(positions.data), d.N, d.C, d.V_local,
        seq_len, pos_offset, vocab_start);
  });
  CUDA_LAUNCH_CHECK();
}

void embedding_backward(Context& ctx, Tensor dwte, Tensor dwpe, Tensor dout, Tensor ids,
                        int64_t T, int64_t pos_offset, int64_t vocab_start, Tensor positions) {
  const char* op = "embedding_backward";
  CudaState& st = state_of(ctx);
  const Dims d = check_args(st, op, dout, ids, dwte, dwpe, T, pos_offset, positions);
  check_dtype(dwte, DType::f32, op, "dwte");
  if (!dwpe.empty()) check_dtype(dwpe, DType::f32, op, "dwpe");
  if (d.N * d.C == 0) return;
  TRAINER_CHECK(d.N < (int64_t{1} << 31), "{}: {} tokens exceed int32 token indices", op, d.N);
  const int n = static_cast<int>(d.N);
  // Scratch: sorted keys, token indices in and out, then cub's temporary storage.
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr),
                                             static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), n, 0, 32, st.stream));
  const size_t ints = (static_cast<size_t>(n) + 63) / 64 * 64;  // keep each part 256-byte aligned
  const size_t bytes = embedding_backward_scratch_bytes(n);
  TRAINER_CHECK(3 * ints * sizeof(int32_t) + temp_bytes <= bytes,
                "{}: cub's sort of {} ids needs {} bytes, over the {} planned (op_scratch.cpp)", op,
                n, temp_bytes, bytes - 3 * ints * sizeof(int32_t));
  auto* base = static_cast<int32_t*>(scratch(st, bytes, op));
  int32_t* sorted_keys = base;
  int32_t* tokens = base + ints;
  int32_t* sorted_tokens = base + 2 * ints;
  void* temp = base + 3 * ints;
  iota_kernel<<<grid_for(n, kThreads), kThreads, 0, st.stream>>>(tokens, n);
  CUDA_LAUNCH_CHECK();
  // table rows [key_start, key_start + rows) += dout rows grouped by key. The
  // second call reuses the buffers: stream order puts its sort after the
  // first call's sums.
  auto sum_by_key = [&](float* table, const Tensor& keys, int64_t rows, int64_t key_start) {
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes,
                                               static_cast<const int32_t*>(keys.data), sorted_keys,
                                               static_cast<const int32_t*>(tokens), sorted_tokens,
                                               n, 0, 32, st.stream));
    TRAINER_FLOAT_DISPATCH(dout.dtype, op, {
      embedding_backward_rows_kernel<T><<<static_cast<unsigned>(n), 128, 0, st.stream>>>(
          table, static_cast<const T*>(dout.data), sorted_keys, sorted_tokens, d.N, d.C, rows,
          key_start);
    });
    CUDA_LAUNCH_CHECK();
  };
  sum_by_key(static_cast<float*>(dwte.data), ids, d.V_local, vocab_start);
  if (dwpe.empty()) return;
  if (!positions.empty()) {
    sum_by_key(static_cast<float*>(dwpe.data), positions, dwpe.shape[0], 0);
    return;
  }
  const int64_t seq_len = T;  // `T` names the element type inside the dispatch
  TRAINER_FLOAT_DISPATCH(dout.dtype, op, {
    embedding_backward_wpe_kernel<T><<<grid_for(seq_len * d.C, kThreads), kThreads, 0, st.stream>>>(
        static_cast<float*>(dwpe.data), static_cast<const T*>(dout.data), d.N / seq_len, seq_len,
        d.C, pos_offset);
  });
  CUDA_LAUNCH_CHECK();
}

}  // namespace trainer::cuda
