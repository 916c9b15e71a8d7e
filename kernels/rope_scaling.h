// RoPE's frequencies: the base theta and a scaling of them for contexts longer
// than the model was pretrained on (Hugging Face's rope_type):
// - llama3 (Llama 3.1, transformers' _compute_llama3_parameters): frequencies
//   whose wavelength is under original_max_positions / high_freq_factor stay,
//   those over original_max_positions / low_freq_factor are divided by
//   factor, and the band between blends the two;
// - linear (position interpolation): every frequency divided by factor;
// - yarn (Peng et al. 2023, _compute_yarn_parameters): frequency i divided by
//   factor as a ramp over i goes from 0 (i <= ramp_low: extrapolated, kept)
//   to 1 (i >= ramp_high: interpolated), and cos/sin scaled by
//   attention_factor (which scales q.k by its square). DeepSeek's configs
//   add mscale and mscale_all_dim: the default attention_factor becomes
//   m(mscale) / m(mscale_all_dim), m(x) = 0.1 x ln(factor) + 1, and
//   DeepSeek's attention (model.mla) multiplies its softmax scale by
//   m(mscale_all_dim)^2 (mla_softmax_multiplier).
// Shared by the CPU and CUDA kernels so both compute the same angles.
// Header-only, host and device.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/numeric.h"

namespace trainer {

enum class RopeKind : uint8_t { llama3, linear, yarn };

struct RopeScaling {
  double factor = 0;  // 0: plain RoPE
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  double original_max_positions = 8192;
  RopeKind kind = RopeKind::llama3;
  double ramp_low = 0, ramp_high = 0;  // yarn: yarn_scaling() sets them
  double attention_factor = 1;         // yarn: cos and sin are multiplied by it
  double beta_fast = 32, beta_slow = 1;  // yarn: what set the ramp (for config.json)
  double mscale = 0, mscale_all_dim = 0;  // yarn: DeepSeek's keys; 0 = absent
  bool active() const { return factor > 0; }
};

// The rotation's parameters, as a RoPE op takes them (a plain float theta converts).
struct Rope {
  float theta = 10000.0f;
  RopeScaling scaling;
  Rope() = default;
  Rope(float base) : theta(base) {}  // NOLINT: plain RoPE wherever a theta is passed
  Rope(float base, const RopeScaling& s) : theta(base), scaling(s) {}
};

// inv_freq (theta^(-2i/D), pair i) after the scaling (unchanged without it).
TRAINER_HOST_DEVICE inline double scaled_inv_freq(double inv_freq, int64_t i, const RopeScaling& s) {
  if (!(s.factor > 0)) return inv_freq;
  if (s.kind == RopeKind::linear) return inv_freq / s.factor;
  if (s.kind == RopeKind::yarn) {
    double ramp = (static_cast<double>(i) - s.ramp_low) / (s.ramp_high - s.ramp_low);
    ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
    return inv_freq / s.factor * ramp + inv_freq * (1.0 - ramp);
  }
  const double wavelen = 2.0 * 3.14159265358979323846 / inv_freq;
  if (wavelen < s.original_max_positions / s.high_freq_factor) return inv_freq;
  if (wavelen > s.original_max_positions / s.low_freq_factor) return inv_freq / s.factor;
  const double smooth =
      (s.original_max_positions / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

// What multiplies cos and sin (YaRN's attention factor; 1 otherwise).
TRAINER_HOST_DEVICE inline double rope_magnitude(const RopeScaling& s) {
  return s.factor > 0 && s.kind == RopeKind::yarn ? s.attention_factor : 1.0;
}

// transformers' yarn_get_mscale: 0.1 m ln(factor) + 1, or 1 for factor <= 1.
inline double yarn_mscale(double factor, double m) {
  return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}

// What DeepseekV3Attention multiplies its softmax scale (qk_head_dim^-0.5)
// by: m(mscale_all_dim)^2 under YaRN with mscale_all_dim, else 1. Other
// attention (transformers' Llama family) has no such factor.
inline double mla_softmax_multiplier(const RopeScaling& s) {
  if (!(s.factor > 0) || s.kind != RopeKind::yarn || !(s.mscale_all_dim > 0)) return 1.0;
  const double m = yarn_mscale(s.factor, s.mscale_all_dim);
  return m * m;
}

// YaRN over head size `dim` and base `theta`, as transformers computes it:
// the ramp runs between the pairs that turn beta_fast and beta_slow times
// over original_max_positions (floored and ceiled, clamped to [0, dim - 1]);
// attention_factor <= 0 means transformers' default: m(mscale) /
// m(mscale_all_dim) when both are given (> 0), else m(1) = 0.1 ln(factor) + 1.
RopeScaling yarn_scaling(double factor, double original_max_positions, double beta_fast,
                         double beta_slow, double attention_factor, int64_t dim, double theta,
                         double mscale = 0, double mscale_all_dim = 0);

}  // namespace trainer
