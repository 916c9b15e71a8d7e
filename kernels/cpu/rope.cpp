// CPU rotary position embedding (rotate-half layout); angles computed in double.
#include "kernels/rope.h"

#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward: the transpose).
void rope_apply(const char* op, Tensor out, Tensor inp, const Rope& rope, int64_t pos_offset,
                Tensor positions, float sign) {
  TRAINER_CHECK(inp.ndim == 4, "{}: input {} must be (B, T, H, D)", op, inp.str());
  const int64_t B = inp.size(0), T = inp.size(1), H = inp.size(2), D = inp.size(3);
  check_shape(inp, {B, T, H, D}, op);
  check_shape(out, {B, T, H, D}, op);
  TRAINER_CHECK(D % 2 == 0, "{}: head dim {} must be even", op, D);
  const float theta = rope.theta;
  TRAINER_CHECK(theta > 0.0f && pos_offset >= 0, "{}: theta {} and pos_offset {}", op, theta,
                pos_offset);
  const int32_t* pos = nullptr;
  if (!positions.empty()) {
    check_shape(positions, {B, T}, op);
    pos = i32(positions, op, "positions");
    TRAINER_CHECK(pos_offset == 0, "{}: positions given with pos_offset {}", op, pos_offset);
  }
  Staging st(op);
  float* o = st.out(out, "out");
  const float* x = st.in(inp, "inp");
  const int64_t half = D / 2;
  const double magnitude = rope_magnitude(rope.scaling);
  // Without positions every sequence shares row t's angles: one table per t.
  const int64_t rows = pos ? B * T : T, per_row = pos ? 1 : B;
#pragma omp parallel
  {
    float* cs = thread_scratch(0, 2 * half);
    float* sn = cs + half;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const double at = static_cast<double>(pos ? pos[r] : pos_offset + r);
      for (int64_t i = 0; i < half; ++i) {
        const double angle =
            at * scaled_inv_freq(std::pow(static_cast<double>(theta), -2.0 * i / D), i, rope.scaling);
        // YaRN's magnitude m: backward is the transpose of m R, i.e. m R^-1.
        cs[i] = static_cast<float>(magnitude * std::cos(angle));
        sn[i] = sign * static_cast<float>(magnitude * std::sin(angle));
      }
      for (int64_t k = 0; k < per_row; ++k) {
        const int64_t token = pos ? r : k * T + r;  // (b, t) flattened
        for (int64_t h = 0; h < H; ++h) {
          const int64_t off = (token * H + h) * D;
          const float* xi = x + off;
          float* oi = o + off;
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = xi[i], x2 = xi[i + half];
            oi[i] = x1 * cs[i] - x2 * sn[i];
            oi[i + half] = x2 * cs[i] + x1 * sn[i];
          }
        }
      }
    }
  }
  st.commit();
}

}  // namespace

void rope_forward(Context& ctx, Tensor out, Tensor inp, Rope rope, int64_t pos_offset,
                  Tensor positions) {
  rope_apply("rope_forward", out, inp, rope, pos_offset, positions, 1.0f);
}

void rope_backward(Context& ctx, Tensor dinp, Tensor dout, Rope rope, int64_t pos_offset,
                   Tensor positions) {
  rope_apply("rope_backward", dinp, dout, rope, pos_offset, positions, -1.0f);
}

}  // namespace trainer::cpu
