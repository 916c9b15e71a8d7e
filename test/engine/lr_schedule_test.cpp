// LR schedules: warmup ramp, end points and shapes of each decay.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/lr_schedule.h"

using namespace trainer::engine;

TEST_CASE("warmup then cosine reaches min_lr at the last step", "[cpu][engine]") {
  OptimizerSpec o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  o.schedule = Schedule::cosine;
  CHECK(learning_rate(o, 110, 1) == Approx(0.1));
  CHECK(learning_rate(o, 110, 10) == Approx(1.0));
  CHECK(learning_rate(o, 110, 60) == Approx(0.55));  // half way: mean of lr and min_lr
  CHECK(learning_rate(o, 110, 110) == Approx(0.1));
  for (int s = 11; s < 110; ++s) CHECK(learning_rate(o, 110, s + 1) <= learning_rate(o, 110, s));
}

TEST_CASE("linear, constant and wsd schedules", "[cpu][engine]") {
  OptimizerSpec o;
  o.lr = 1.0;
  o.min_lr = 0.0;
  o.warmup_steps = 0;
  o.schedule = Schedule::linear;
  CHECK(learning_rate(o, 100, 50) == Approx(0.5));
  CHECK(learning_rate(o, 100, 100) == Approx(0.0).margin(1e-12));
  o.schedule = Schedule::constant;
  CHECK(learning_rate(o, 100, 77) == 1.0);
  o.schedule = Schedule::wsd;
  o.decay_steps = 20;
  CHECK(learning_rate(o, 100, 80) == 1.0);
  CHECK(learning_rate(o, 100, 90) == Approx(0.5));
  CHECK(learning_rate(o, 100, 100) == Approx(0.0).margin(1e-12));
}

// Megatron's OptimizerParamScheduler.get_lr, the formulas transcribed at the
// points checked: warmup from --lr-warmup-init, inverse-square-root, and the
// WSD decay styles (--lr-wsd-decay-style).
TEST_CASE("warmup from warmup_init_lr, inverse_sqrt and the wsd decay styles are Megatron's",
          "[cpu][engine]") {
  OptimizerSpec o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  o.warmup_init_lr = 0.2;
  o.schedule = Schedule::constant;
  CHECK(learning_rate(o, 100, 1) == Approx(0.2 + 0.8 * 1 / 10));
  CHECK(learning_rate(o, 100, 5) == Approx(0.2 + 0.8 * 5 / 10));
  CHECK(learning_rate(o, 100, 10) == Approx(1.0));
  o.warmup_init_lr = 0.0;

  o.schedule = Schedule::inverse_sqrt;
  CHECK(learning_rate(o, 1000, 10) == Approx(1.0));  // the end of warmup
  CHECK(learning_rate(o, 1000, 40) == Approx(std::sqrt(10.0) / std::sqrt(40.0)));  // 0.5
  CHECK(learning_rate(o, 1000, 250) == Approx(0.2));
  CHECK(learning_rate(o, 10000, 4000) == Approx(0.1));  // sqrt(10 / 4000) = 0.05, floored at min_lr
  o.warmup_steps = 0;
  CHECK(learning_rate(o, 1000, 4) == Approx(0.5));  // warmup 0 counts as 1: sqrt(1 / 4)

  // WSD over 100 steps, decaying in the last 20: at 15 of the 20 decay steps
  // (ratio 0.75) each style's coefficient of (lr - min_lr) above min_lr.
  o.warmup_steps = 10;
  o.schedule = Schedule::wsd;
  o.decay_steps = 20;
  const double r = 0.75;
  const std::pair<WsdDecay, double> styles[] = {
      {WsdDecay::linear, 1.0 - r},
      {WsdDecay::cosine, 0.5 * (std::cos(M_PI * r) + 1.0)},
      {WsdDecay::exponential, 2.0 * std::pow(0.5, r) - 1.0},
      {WsdDecay::minus_sqrt, 1.0 - std::sqrt(r)}};
  for (const auto& [style, coeff] : styles) {
    o.wsd_decay_style = style;
    INFO("style " << to_string(style));
    CHECK(learning_rate(o, 100, 80) == Approx(1.0));  // the stable phase's last step
    CHECK(learning_rate(o, 100, 95) == Approx(0.1 + coeff * 0.9));
    CHECK(learning_rate(o, 100, 100) == Approx(0.1));  // every style ends at min_lr
  }
}
