// CPU squared L2 norm, summed in double with a fixed split so the result does
// not depend on scheduling.
#include "kernels/norm.h"

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

TRAINER_CPU_CLONES double sum_squares_range(const float* x, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
  return acc;
}

}  // namespace

void sum_of_squares(Context& ctx, Tensor out, Tensor x) {
  check_shape(out, {1}, "sum_of_squares out");
  Staging st("sum_of_squares");
  float* o = st.inout(out, "out");
  const float* p = st.in(x, "x");
  const int64_t n = x.numel();
  // Fixed-size chunks summed in index order: the same bits for any thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t num_chunks = (n + kChunk - 1) / kChunk;
  double* partial = reinterpret_cast<double*>(thread_scratch(0, 2 * num_chunks + 2));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < num_chunks; ++c)
    partial[c] = sum_squares_range(p + c * kChunk, std::min(kChunk, n - c * kChunk));
  double total = 0.0;
  for (int64_t c = 0; c < num_chunks; ++c) total += partial[c];
  o[0] = static_cast<float>(static_cast<double>(o[0]) + total);
  st.commit();
}

}  // namespace trainer::cpu
