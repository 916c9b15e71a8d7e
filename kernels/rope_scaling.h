// RoPE's frequencies: the base theta, and Llama 3.1's frequency-dependent
// scaling (Hugging Face rope_type "llama3", transformers'
// _compute_llama3_parameters): frequencies whose wavelength is under
// original_max_positions / high_freq_factor stay, those over
// original_max_positions / low_freq_factor are divided by factor, and the
// band between blends the two. Shared by the CPU and CUDA kernels so both
// compute the same angles. Header-only, host and device.
#pragma once

#include "kernels/numeric.h"

namespace trainer {

struct RopeScaling {
  double factor = 0;  // 0: plain RoPE
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  double original_max_positions = 8192;
  bool active() const { return factor > 0; }
};

// The rotation's parameters, as a RoPE op takes them (a plain float theta converts).
struct Rope {
  float theta = 10000.0f;
  RopeScaling llama3;
  Rope() = default;
  Rope(float base) : theta(base) {}  // NOLINT: plain RoPE wherever a theta is passed
  Rope(float base, const RopeScaling& scaling) : theta(base), llama3(scaling) {}
};

// inv_freq = theta^(-2i/D) after the scaling (unchanged without it).
TRAINER_HOST_DEVICE inline double llama3_inv_freq(double inv_freq, const RopeScaling& s) {
  if (!(s.factor > 0)) return inv_freq;
  const double wavelen = 2.0 * 3.14159265358979323846 / inv_freq;
  if (wavelen < s.original_max_positions / s.high_freq_factor) return inv_freq;
  if (wavelen > s.original_max_positions / s.low_freq_factor) return inv_freq / s.factor;
  const double smooth =
      (s.original_max_positions / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

}  // namespace trainer
