// CPU token + position embedding. Backward splits the columns over threads, so
// every gradient row is summed over tokens in token order: deterministic, no atomics.
#include "kernels/embedding.h"

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

struct EmbeddingShape {
  int64_t N, C, V_local, T_max;
};

EmbeddingShape check_embedding(const char* op, const Tensor& rows, const Tensor& ids,
                               const Tensor& table, const Tensor& pos_table, int64_t T,
                               int64_t pos_offset, const Tensor& positions) {
  EmbeddingShape s{};
  s.N = ids.size(0);
  s.C = table.size(-1);
  s.V_local = table.size(0);
  check_shape(ids, {s.N}, op);
  check_shape(table, {s.V_local, s.C}, op);
  check_shape(rows, {s.N, s.C}, op);
  if (!pos_table.empty() && !positions.empty()) {
    s.T_max = pos_table.size(0);
    check_shape(pos_table, {s.T_max, s.C}, op);
    check_shape(positions, {s.N}, op);
    TRAINER_CHECK(pos_offset == 0, "{}: positions given with pos_offset {}", op, pos_offset);
    const int32_t* p = i32(positions, op, "positions");
    for (int64_t n = 0; n < s.N; ++n)
      TRAINER_CHECK(p[n] >= 0 && p[n] < s.T_max, "{}: position {} of token {} exceeds the {} learned positions",
                    op, p[n], n, s.T_max);
  } else if (!pos_table.empty()) {
    s.T_max = pos_table.size(0);
    check_shape(pos_table, {s.T_max, s.C}, op);
    TRAINER_CHECK(T > 0 && s.N % T == 0, "{}: {} tokens are not a whole number of sequences of {}",
                  op, s.N, T);
    TRAINER_CHECK(pos_offset >= 0 && pos_offset + T <= s.T_max,
                  "{}: positions [{}, {}) exceed the {} learned positions", op, pos_offset,
                  pos_offset + T, s.T_max);
  }
  return s;
}

}  // namespace

void embedding_forward(Context& ctx, Tensor out, Tensor ids, Tensor wte, Tensor wpe, int64_t T,
                       int64_t pos_offset, int64_t vocab_start, Tensor positions) {
  const char* op = "embedding_forward";
  const EmbeddingShape s = check_embedding(op, out, ids, wte, wpe, T, pos_offset, positions);
  const int32_t* at = positions.empty() ? nullptr : i32(positions, op, "positions");
  Staging st(op);
  float* o = st.out(out, "out");
  const int32_t* id = i32(ids, op, "ids");
  // A bf16/fp16 table is not staged whole: the lookup converts only the rows it reads.
  check_float_arg(wte, op, "wte");
  const bool narrow = wte.dtype != DType::f32;
  const float* te = narrow ? nullptr : st.in(wte, "wte");
  const float* pe = wpe.empty() ? nullptr : st.in(wpe, "wpe");
  const int64_t C = s.C;
#pragma omp parallel
  {
    float* converted = narrow ? thread_scratch(0, C) : nullptr;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < s.N; ++n) {
      float* row = o + n * C;
      const int64_t local = static_cast<int64_t>(id[n]) - vocab_start;
      const float* tok = nullptr;
      if (local >= 0 && local < s.V_local) {
        if (narrow) {
          to_f32(wte.dtype, static_cast<const char*>(wte.data) + local * C * 2, converted, C);
          tok = converted;
        } else {
          tok = te + local * C;
        }
      }
      const float* pos = pe ? pe + (at ? at[n] : pos_offset + n % T) * C : nullptr;
      if (tok && pos) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) row[c] = tok[c] + pos[c];
      } else if (tok) {
        std::memcpy(row, tok, sizeof(float) * C);
      } else if (pos) {
        std::memcpy(row, pos, sizeof(float) * C);
      } else {
        std::memset(row, 0, sizeof(float) * C);
      }
    }
  }
  st.commit();
}

void embedding_backward(Context& ctx, Tensor dwte, Tensor dwpe, Tensor dout, Tensor ids,
                        int64_t T, int64_t pos_offset, int64_t vocab_start, Tensor positions) {
  const char* op = "embedding_backward";
  const EmbeddingShape s = check_embedding(op, dout, ids, dwte, dwpe, T, pos_offset, positions);
  const int32_t* at = positions.empty() ? nullptr : i32(positions, op, "positions");
  Staging st(op);
  const float* dy = st.in(dout, "dout");
  const int32_t* id = i32(ids, op, "ids");
  float* dte = st.inout(dwte, "dwte");
  float* dpe = dwpe.empty() ? nullptr : st.inout(dwpe, "dwpe");
  const int64_t C = s.C;
#pragma omp parallel
  {
    int64_t c0, c1;
    split_range(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
    if (c1 > c0) {
      for (int64_t n = 0; n < s.N; ++n) {
        const int64_t local = static_cast<int64_t>(id[n]) - vocab_start;
        const float* g = dy + n * C;
        if (local >= 0 && local < s.V_local) {
          float* dst = dte + local * C;
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) dst[c] += g[c];
        }
        if (dpe) {
          float* dst = dpe + (at ? at[n] : pos_offset + n % T) * C;
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) dst[c] += g[c];
        }
      }
    }
  }
  st.commit();
}

}  // namespace trainer::cpu
