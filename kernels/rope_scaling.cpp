// YaRN's ramp and attention factor (kernels/rope_scaling.h), computed once on
// the host as transformers' _compute_yarn_parameters does (truncate: true).
#include "kernels/rope_scaling.h"

#include <algorithm>
#include <cmath>

namespace trainer {

RopeScaling yarn_scaling(double factor, double original_max_positions, double beta_fast,
                         double beta_slow, double attention_factor, int64_t dim, double theta,
                         double mscale, double mscale_all_dim) {
  constexpr double kPi = 3.14159265358979323846;
  // The pair index whose wavelength turns `rotations` times over the pretrained context.
  auto correction = [&](double rotations) {
    return static_cast<double>(dim) * std::log(original_max_positions / (rotations * 2.0 * kPi)) /
           (2.0 * std::log(theta));
  };
  RopeScaling s;
  s.kind = RopeKind::yarn;
  s.factor = factor;
  s.original_max_positions = original_max_positions;
  s.beta_fast = beta_fast, s.beta_slow = beta_slow;
  s.ramp_low = std::max(std::floor(correction(beta_fast)), 0.0);
  s.ramp_high = std::min(std::ceil(correction(beta_slow)), static_cast<double>(dim - 1));
  if (s.ramp_low == s.ramp_high) s.ramp_high += 0.001;  // transformers' guard against 0 / 0
  s.mscale = mscale, s.mscale_all_dim = mscale_all_dim;
  if (attention_factor > 0)
    s.attention_factor = attention_factor;
  else if (mscale > 0 && mscale_all_dim > 0)
    s.attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim);
  else
    s.attention_factor = yarn_mscale(factor, 1.0);
  return s;
}

}  // namespace trainer
