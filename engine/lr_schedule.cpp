// Warmup ramps linearly to lr over warmup_steps (step 1 gets lr/warmup, as
// llm.c and Megatron do), then decays toward min_lr by the chosen schedule.
#include "engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace trainer::engine {

double learning_rate(const OptimizerSpec& opt, int total_steps, int step) {
  if (opt.warmup_steps > 0 && step <= opt.warmup_steps)
    return opt.lr * step / opt.warmup_steps;
  int decay_span = std::max(1, total_steps - opt.warmup_steps);
  double progress = std::clamp(double(step - opt.warmup_steps) / decay_span, 0.0, 1.0);
  switch (opt.schedule) {
    case Schedule::constant:
      return opt.lr;
    case Schedule::linear:
      return opt.lr + (opt.min_lr - opt.lr) * progress;
    case Schedule::cosine:
      return opt.min_lr + 0.5 * (opt.lr - opt.min_lr) * (1.0 + std::cos(M_PI * progress));
    case Schedule::wsd: {
      // Warmup-stable-decay: constant lr, then a linear decay over the last decay_steps.
      int decay = opt.decay_steps ? *opt.decay_steps : std::max(1, total_steps / 5);
      int decay_start = total_steps - decay;
      if (step <= decay_start) return opt.lr;
      double p = std::clamp(double(step - decay_start) / decay, 0.0, 1.0);
      return opt.lr + (opt.min_lr - opt.lr) * p;
    }
  }
  return opt.lr;
}

}  // namespace trainer::engine
