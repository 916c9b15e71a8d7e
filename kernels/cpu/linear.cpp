// CPU linear layer: single-threaded OpenBLAS sgemm calls, one per OpenMP thread
// on its own block of rows or columns (see blas_single_threaded in cpu_common.h).
#include "kernels/linear.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

// DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels by CPU model at load time;
// 0.3.21 does not know Emerald/Granite Rapids and falls back to the SSE3
// "Prescott" kernels, 4-5x slower than its AVX-512 ones. When the choice is
// weaker than what the CPU supports and the user did not set
// OPENBLAS_CORETYPE, the kernels are chosen again from the CPU's features.
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace {

bool core_is(const std::string& core, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (core == n) return true;
  return false;
}

void fix_blas_core() {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || std::getenv("OPENBLAS_CORETYPE")) return;
  const std::string core = openblas_get_corename();
  const char* want = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    if (!core_is(core, {"SkylakeX", "Cooperlake", "SapphireRapids"})) want = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    if (!core_is(core, {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Excavator"}))
      want = "Haswell";
  }
  if (!want) return;
  setenv("OPENBLAS_CORETYPE", want, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace

void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__x86_64__) && defined(__GNUC__)
    fix_blas_core();
#endif
    openblas_set_num_threads(1);
  });
}

namespace {

// Rows M of a (..., last) tensor whose leading dims are flattened.
int64_t leading_rows(const Tensor& t, int64_t last, const char* op, const char* name) {
  TRAINER_CHECK(t.ndim >= 1 && t.size(-1) == last, "{}: {} has shape {}, expected last dim {}",
                op, name, t.str(), last);
  return last == 0 ? 0 : t.numel() / last;
}

void check_same_leading(const Tensor& a, const Tensor& b, const char* op) {
  bool ok = a.ndim == b.ndim;
  for (int d = 0; ok && d + 1 < a.ndim; ++d) ok = a.shape[d] == b.shape[d];
  TRAINER_CHECK(ok, "{}: leading dims of {} and {} differ", op, a.str(), b.str());
}

// A GEMM is cut into chunks of rows (or columns) whose bounds depend on the
// size alone, never on the thread count, and each chunk is one single-threaded
// sgemm call: OpenBLAS may round an element differently by the shape of the
// call computing it (its Haswell kernels, which AMD CPUs get, do: one call and
// the same rows in two calls differ by an ulp), so calls that followed the
// threads would make the results depend on OMP_NUM_THREADS. At most kChunks
// chunks, each a multiple of 16 rows (OpenBLAS's register blocking); the
// threads take them in contiguous runs (schedule(static)).
constexpr int64_t kBlock = 16;
constexpr int64_t kChunks = 16;

struct Chunks {
  int64_t n, size, count;
  explicit Chunks(int64_t rows)
      : n(rows),
        size(std::max<int64_t>(kBlock, ((rows + kChunks - 1) / kChunks + kBlock - 1) / kBlock * kBlock)),
        count(rows <= 0 ? 0 : (rows + size - 1) / size) {}
  int64_t begin(int64_t c) const { return std::min(n, c * size); }
  int64_t end(int64_t c) const { return std::min(n, (c + 1) * size); }
};

}  // namespace

void linear_forward(Context& ctx, Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const char* op = "linear_forward";
  const int64_t N = weight.size(0), K = weight.size(-1);
  check_shape(weight, {N, K}, "linear_forward weight");
  const int64_t M = leading_rows(inp, K, op, "inp");
  leading_rows(out, N, op, "out");
  check_same_leading(out, inp, op);
  Staging st(op);
  float* o = st.out(out, "out");
  const float* x = st.in(inp, "inp");
  const float* w = st.in(weight, "weight");
  const float* b = nullptr;
  if (!bias.empty()) {
    check_shape(bias, {N}, "linear_forward bias");
    b = st.in(bias, "bias");
  }
  blas_single_threaded();
  // The larger of M and N is split so each thread's GEMM stays large (the LM
  // head has N = vocab, a transformer block's GEMMs have M = tokens).
  const bool split_n = N >= M;
  const Chunks chunks(split_n ? N : M);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks.count; ++c) {
    const int64_t r0 = chunks.begin(c), r1 = chunks.end(c);
    const int64_t m0 = split_n ? 0 : r0, m1 = split_n ? M : r1;
    const int64_t n0 = split_n ? r0 : 0, n1 = split_n ? r1 : N;
    if (m1 > m0 && n1 > n0) {
      for (int64_t i = m0; i < m1; ++i) {
        float* row = o + i * N;
        for (int64_t j = n0; j < n1; ++j) row[j] = b ? b[j] : 0.0f;
      }
      if (K > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m1 - m0, n1 - n0, K, 1.0f,
                    x + m0 * K, K, w + n0 * K, K, 1.0f, o + m0 * N + n0, N);
    }
  }
  st.commit();
}

void linear_backward(Context& ctx, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                     Tensor inp, Tensor weight) {
  const char* op = "linear_backward";
  const int64_t N = weight.size(0), K = weight.size(-1);
  check_shape(weight, {N, K}, "linear_backward weight");
  check_shape(dweight, {N, K}, "linear_backward dweight");
  const int64_t M = leading_rows(inp, K, op, "inp");
  leading_rows(dout, N, op, "dout");
  check_same_leading(dout, inp, op);
  Staging st(op);
  const float* dy = st.in(dout, "dout");
  const float* x = st.in(inp, "inp");
  const float* w = st.in(weight, "weight");
  float* dw = st.inout(dweight, "dweight");
  float* dx = nullptr;
  if (!dinp.empty()) {
    leading_rows(dinp, K, op, "dinp");
    check_same_leading(dinp, inp, op);
    dx = st.out(dinp, "dinp");
  }
  float* db = nullptr;
  if (!dbias.empty()) {
    check_shape(dbias, {N}, "linear_backward dbias");
    db = st.inout(dbias, "dbias");
  }
  blas_single_threaded();
  const Chunks rows(M), cols(N);
#pragma omp parallel
  {
    if (dx) {  // dinp rows split over M: a chunk reads all of weight, its rows of dout
#pragma omp for schedule(static)
      for (int64_t c = 0; c < rows.count; ++c) {
        const int64_t r0 = rows.begin(c), r1 = rows.end(c);
        if (N > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, K, N, 1.0f,
                      dy + r0 * N, N, w, K, 0.0f, dx + r0 * K, K);
        else
          std::memset(dx + r0 * K, 0, sizeof(float) * (r1 - r0) * K);
      }
    }
    // dweight and dbias rows split over N, so accumulation needs no reduction
    // and every element is summed in the same order whatever the thread count.
#pragma omp for schedule(static)
    for (int64_t c = 0; c < cols.count; ++c) {
      const int64_t r0 = cols.begin(c), r1 = cols.end(c);
      if (M > 0 && K > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, K, M, 1.0f, dy + r0, N, x,
                    K, 1.0f, dw + r0 * K, K);
      if (db) {
        for (int64_t i = 0; i < M; ++i) {
          const float* row = dy + i * N;
          for (int64_t j = r0; j < r1; ++j) db[j] += row[j];
        }
      }
    }
  }
  st.commit();
}

}  // namespace trainer::cpu
