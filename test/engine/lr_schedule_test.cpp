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
