// Token + position embedding forward and deterministic backward (kernels/embedding.h).
// Backward uses no atomics: each thread owns one column of dwte and walks the
// tokens in order, so a row hit by many tokens sums them in a fixed order.
#include "kernels/cuda/common.cuh"
#include "kernels/embedding.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void embedding_forward_kernel(T* out, const int32_t* ids, const T* wte, const T* wpe,
                                         int64_t N, int64_t C, int64_t V_local, int64_t T_len,
                                         int64_t pos_offset, int64_t vocab_start) {
  const int64_t total = N * C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t v = static_cast<int64_t>(ids[n]) - vocab_start;
    float x = (v >= 0 && v < V_local) ? to_float(wte[v * C + c]) : 0.0f;
    if (wpe) x += to_float(wpe[(pos_offset + n % T_len) * C + c]);
    out[i] = from_float<T>(x);
  }
}

template <class T>
__global__ void embedding_backward_wte_kernel(float* dwte, const T* dout, const int32_t* ids,
                                              int64_t N, int64_t C, int64_t V_local,
                                              int64_t vocab_start) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t v = static_cast<int64_t>(ids[n]) - vocab_start;
    if (v >= 0 && v < V_local) dwte[v * C + c] += to_float(dout[n * C + c]);
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

Dims check_args(const char* op, const Tensor& rows, const Tensor& ids, const Tensor& table,
                const Tensor& pos_table, int64_t T, int64_t pos_offset) {
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
  if (!pos_table.empty()) {
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
                       int64_t pos_offset, int64_t vocab_start) {
  const char* op = "embedding_forward";
  CudaState& st = state_of(ctx);
  const Dims d = check_args(op, out, ids, wte, wpe, T, pos_offset);
  TRAINER_CHECK(out.dtype == wte.dtype && (wpe.empty() || wpe.dtype == wte.dtype),
                "{}: out {}, wte {}, wpe {} must share a dtype", op, out.str(), wte.str(), wpe.str());
  if (d.N * d.C == 0) return;
  const int64_t seq_len = T;  // `T` names the element type inside the dispatch
  TRAINER_FLOAT_DISPATCH(out.dtype, op, {
    embedding_forward_kernel<T><<<grid_for(d.N * d.C, kThreads), kThreads, 0, st.stream>>>(
        static_cast<T*>(out.data), static_cast<const int32_t*>(ids.data),
        static_cast<const T*>(wte.data), wpe.empty() ? nullptr : static_cast<const T*>(wpe.data),
        d.N, d.C, d.V_local, seq_len, pos_offset, vocab_start);
  });
  CUDA_LAUNCH_CHECK();
}

void embedding_backward(Context& ctx, Tensor dwte, Tensor dwpe, Tensor dout, Tensor ids,
                        int64_t T, int64_t pos_offset, int64_t vocab_start) {
  const char* op = "embedding_backward";
  CudaState& st = state_of(ctx);
  const Dims d = check_args(op, dout, ids, dwte, dwpe, T, pos_offset);
  check_dtype(dwte, DType::f32, op, "dwte");
  if (!dwpe.empty()) check_dtype(dwpe, DType::f32, op, "dwpe");
  if (d.N * d.C == 0) return;
  const int64_t seq_len = T;  // `T` names the element type inside the dispatch
  TRAINER_FLOAT_DISPATCH(dout.dtype, op, {
    const T* dy = static_cast<const T*>(dout.data);
    embedding_backward_wte_kernel<T><<<grid_for(d.C, 64, int64_t{1} << 30), 64, 0, st.stream>>>(
        static_cast<float*>(dwte.data), dy, static_cast<const int32_t*>(ids.data), d.N, d.C,
        d.V_local, vocab_start);
    CUDA_LAUNCH_CHECK();
    if (!dwpe.empty()) {
      embedding_backward_wpe_kernel<T><<<grid_for(seq_len * d.C, kThreads), kThreads, 0, st.stream>>>(
          static_cast<float*>(dwpe.data), dy, d.N / seq_len, seq_len, d.C, pos_offset);
      CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace trainer::cuda
