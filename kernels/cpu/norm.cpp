// CPU whole-tensor sums (squared L2 norm, plain sum), in double with a fixed
// split so the result does not depend on scheduling.
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

TRAINER_CPU_CLONES double sum_range(const float* x, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]);
  return acc;
}

// Fixed-size chunks summed in index order: the same bits for any thread count.
template <class Range>
double chunked_sum(const float* p, int64_t n, Range range) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t num_chunks = (n + kChunk - 1) / kChunk;
  double* partial = reinterpret_cast<double*>(thread_scratch(0, 2 * num_chunks + 2));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < num_chunks; ++c)
    partial[c] = range(p + c * kChunk, std::min(kChunk, n - c * kChunk));
  double total = 0.0;
  for (int64_t c = 0; c < num_chunks; ++c) total += partial[c];
  return total;
}

}  // namespace

void sum_of_squares(Context& ctx, Tensor out, Tensor x) {
  check_shape(out, {1}, "sum_of_squares out");
  Staging st("sum_of_squares");
  float* o = st.inout(out, "out");
  const float* p = st.in(x, "x");
  const double total = chunked_sum(p, x.numel(), [](const float* c, int64_t m) {
    return sum_squares_range(c, m);
  });
  o[0] = static_cast<float>(static_cast<double>(o[0]) + total);
  st.commit();
}

void sum_values(Context&, Tensor out, Tensor x) {
  const char* op = "sum_values";
  TRAINER_CHECK(out.device == Device::cpu && out.dtype == DType::f64 && out.numel() == 1,
                "{}: out {} must be one fp64 value on the CPU", op, out.str());
  Staging st(op);
  const float* p = st.in(x, "x");
  *static_cast<double*>(out.data) += chunked_sum(p, x.numel(), [](const float* c, int64_t m) {
    return sum_range(c, m);
  });
}

}  // namespace trainer::cpu
