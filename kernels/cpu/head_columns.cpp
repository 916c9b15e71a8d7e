// Column blocks of per-head rows on the CPU (kernels/head_columns.h).
#include "kernels/head_columns.h"

#include "kernels/cpu/staging.h"

namespace trainer::cpu {

void copy_head_columns(Context& ctx, Tensor out, int64_t out_col, Tensor in, int64_t in_col,
                       int64_t width) {
  const HeadColumns h = check_head_columns(out, out_col, in, in_col, width);
  Staging st("copy_head_columns");
  float* o = st.inout(out, "out");  // its other columns are kept
  const float* x = st.in(in, "in");
  const int64_t Do = out.size(2), Di = in.size(2);
  if (h.out_heads == 1 && h.in_heads > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < h.rows; ++r)
      for (int64_t j = 0; j < width; ++j) {
        float sum = 0.0f;
        for (int64_t k = 0; k < h.in_heads; ++k) sum += x[(r * h.in_heads + k) * Di + in_col + j];
        o[r * Do + out_col + j] = sum;
      }
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < h.rows; ++r)
      for (int64_t k = 0; k < h.out_heads; ++k) {
        const float* src = x + (r * h.in_heads + (h.in_heads == 1 ? 0 : k)) * Di + in_col;
        float* dst = o + (r * h.out_heads + k) * Do + out_col;
        for (int64_t j = 0; j < width; ++j) dst[j] = src[j];
      }
  }
  st.commit();
}

}  // namespace trainer::cpu
