// Warmup ramps linearly from warmup_init_lr (0 by default) to lr over
// warmup_steps (step 1 gets lr/warmup, as llm.c and Megatron do), then decays
// toward min_lr by the chosen schedule, each as Megatron's
// OptimizerParamScheduler shapes it.
#include "engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace trainer::engine {

double learning_rate(const OptimizerSpec& opt, int total_steps, int step) {
  if (opt.warmup_steps > 0 && step <= opt.warmup_steps)
    return opt.warmup_init_lr + (opt.lr - opt.warmup_init_lr) * step / opt.warmup_steps;
  int decay_span = std::max(1, total_steps - opt.warmup_steps);
  double progress = std::clamp(double(step - opt.warmup_steps) / decay_span, 0.0, 1.0);
  switch (opt.schedule) {
    case Schedule::constant:
      return opt.lr;
    case Schedule::linear:
      return opt.lr + (opt.min_lr - opt.lr) * progress;
    case Schedule::cosine:
      return opt.min_lr + 0.5 * (opt.lr - opt.min_lr) * (1.0 + std::cos(M_PI * progress));
    case Schedule::inverse_sqrt:
      // Megatron's inverse-square-root: lr at the end of warmup, then lr * sqrt(warmup / step).
      return std::max(opt.min_lr, opt.lr * std::sqrt(double(std::max(opt.warmup_steps, 1))) /
                                      std::sqrt(double(std::max(step, 1))));
    case Schedule::wsd: {
      // Warmup-stable-decay: constant lr, then a decay over the last decay_steps
      // whose shape is Megatron's --lr-wsd-decay-style.
      int decay = opt.decay_steps ? *opt.decay_steps : std::max(1, total_steps / 5);
      int decay_start = total_steps - decay;
      if (step <= decay_start) return opt.lr;
      double p = std::clamp(double(step - decay_start) / decay, 0.0, 1.0);
      double coeff = 0;  // of (lr - min_lr) above min_lr
      switch (opt.wsd_decay_style) {
        case WsdDecay::linear:
          return opt.lr + (opt.min_lr - opt.lr) * p;
        case WsdDecay::cosine:
          coeff = 0.5 * (std::cos(M_PI * p) + 1.0);
          break;
        case WsdDecay::exponential:
          coeff = 2.0 * std::pow(0.5, p) - 1.0;
          break;
        case WsdDecay::minus_sqrt:
          coeff = 1.0 - std::sqrt(p);
          break;
      }
      return opt.min_lr + coeff * (opt.lr - opt.min_lr);
    }
  }
  return opt.lr;
}

}  // namespace trainer::engine
