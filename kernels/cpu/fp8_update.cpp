// CPU delayed-scaling update (kernels/fp8_update.h); Fp8Scaling::update runs it
// on the host state, so the class and the op cannot drift apart.
#include "kernels/fp8_update.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_common.h"

namespace trainer::cpu {

void fp8_scaling_update(Context&, Tensor history, Tensor scale, Tensor scale_inv,
                        Tensor scaled_max) {
  const char* op = "fp8_scaling_update";
  const int64_t n = check_fp8_update_shapes(history, scale, scale_inv, scaled_max);
  const int64_t len = history.size(0);
  float* h = f32(history, op, "history");
  float* s = f32(scale, op, "scale");
  float* inv = f32(scale_inv, op, "scale_inv");
  const float* top = f32(scaled_max, op, "scaled_max");
  for (int64_t i = 0; i < n; ++i) {
    float* col = h + i;
    const float last = col[0];
    float amax = 0.0f;
    // TE reads row r+1 into row r (the last row takes row 0) and zeroes row 0,
    // taking fmaxf of what it moves; in place this is a forward walk.
    for (int64_t r = 0; r < len; ++r) {
      const float a = r < len - 1 ? col[(r + 1) * n] : last;
      amax = std::fmax(amax, a);
      col[r * n] = r > 0 ? a : 0.0f;
    }
    float sc = s[i];
    if (std::isfinite(amax) && amax > 0.0f) sc = top[i] / amax;
    if (std::isinf(sc)) sc = std::numeric_limits<float>::max();
    s[i] = sc;
    inv[i] = 1.0f / sc;
  }
}

}  // namespace trainer::cpu
