// LossScaler: overflow halves and skips, growth after the interval, bounds, static
// mode, the spec's options, and the checkpoint bytes.
#include <catch2/catch.hpp>

#include "engine/loss_scaler.h"
#include "kernels/error.h"

using trainer::engine::LossScaler;
using trainer::engine::LossScalerOptions;

TEST_CASE("loss scaler: a forced overflow halves the scale and skips", "[cpu][precision]") {
  LossScaler s;  // defaults: dynamic, 2^16, interval 2000
  CHECK(s.dynamic());
  CHECK(s.scale() == 65536.0f);
  CHECK(s.inv_scale() == 1.0f / 65536.0f);
  CHECK_FALSE(s.update(false));
  CHECK(s.update(true));
  CHECK(s.scale() == 32768.0f);
  CHECK(s.skipped_steps() == 1);
  CHECK(s.consecutive_skips() == 1);
  CHECK(s.good_steps() == 0);
  CHECK(s.update(true));
  CHECK(s.scale() == 16384.0f);
  CHECK(s.consecutive_skips() == 2);
  CHECK_FALSE(s.update(false));
  CHECK(s.consecutive_skips() == 0);
  CHECK(s.skipped_steps() == 2);
}

TEST_CASE("loss scaler: doubles after 2000 good steps in a row", "[cpu][precision]") {
  LossScaler s;
  s.update(true);  // 32768
  for (int i = 0; i < 1999; ++i) REQUIRE_FALSE(s.update(false));
  CHECK(s.scale() == 32768.0f);
  CHECK(s.good_steps() == 1999);
  s.update(false);
  CHECK(s.scale() == 65536.0f);
  CHECK(s.good_steps() == 0);
  // An overflow restarts the count.
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);
  for (int i = 0; i < 1999; ++i) s.update(false);
  CHECK(s.scale() == 32768.0f);
  s.update(false);
  CHECK(s.scale() == 65536.0f);
}

TEST_CASE("loss scaler: interval, factors and bounds are honoured", "[cpu][precision]") {
  LossScalerOptions o;
  o.initial_scale = 8.0f;
  o.growth_interval = 3;
  o.min_scale = 2.0f;
  o.max_scale = 32.0f;
  LossScaler s(o);
  for (int i = 0; i < 3; ++i) s.update(false);
  CHECK(s.scale() == 16.0f);
  for (int i = 0; i < 9; ++i) s.update(false);
  CHECK(s.scale() == 32.0f);  // capped at max_scale
  for (int i = 0; i < 10; ++i) CHECK(s.update(true));
  CHECK(s.scale() == 2.0f);  // floored at min_scale, still skipping
  CHECK(s.consecutive_skips() == 10);
}

TEST_CASE("loss scaler: static mode keeps its number and still skips", "[cpu][precision]") {
  LossScalerOptions o;
  o.dynamic = false;
  o.initial_scale = 1024.0f;
  LossScaler s(o);
  CHECK_FALSE(s.dynamic());
  for (int i = 0; i < 5000; ++i) s.update(false);
  CHECK(s.scale() == 1024.0f);
  CHECK(s.update(true));
  CHECK(s.scale() == 1024.0f);
  CHECK(s.skipped_steps() == 1);
}

TEST_CASE("loss scaler: options from the precision spec", "[cpu][precision]") {
  trainer::engine::PrecisionSpec spec;
  LossScalerOptions o = trainer::engine::loss_scaler_options(spec);
  CHECK(o.dynamic);
  CHECK(o.initial_scale == 65536.0f);
  spec.dynamic_loss_scale = false;
  spec.loss_scale = 128.0;
  o = trainer::engine::loss_scaler_options(spec);
  CHECK_FALSE(o.dynamic);
  CHECK(LossScaler(o).scale() == 128.0f);
}

TEST_CASE("loss scaler: bad options are input errors", "[cpu][precision]") {
  LossScalerOptions o;
  o.initial_scale = 0.0f;
  CHECK_THROWS_WITH(LossScaler(o), Catch::Contains("precision.loss_scale"));
  o.initial_scale = 1e30f;  // above the dynamic maximum
  CHECK_THROWS_AS(LossScaler(o), trainer::InputError);
  o.dynamic = false;  // a static scale has no bounds
  CHECK(LossScaler(o).scale() == 1e30f);
  o = LossScalerOptions{};
  o.growth_interval = 0;
  CHECK_THROWS_AS(LossScaler(o), trainer::InputError);
  o = LossScalerOptions{};
  o.backoff_factor = 1.0f;
  CHECK_THROWS_AS(LossScaler(o), trainer::InputError);
}

TEST_CASE("loss scaler: checkpoint bytes", "[cpu][precision]") {
  LossScaler s;
  s.update(true);
  for (int i = 0; i < 7; ++i) s.update(false);
  const std::string bytes = s.serialize();
  LossScaler r;
  r.restore(bytes, "ckpt/scaler.bin");
  CHECK(r.scale() == 32768.0f);
  CHECK(r.good_steps() == 7);
  CHECK(r.skipped_steps() == 1);
  CHECK(r.serialize() == bytes);
  // The growth count carries on where it stopped.
  for (int i = 0; i < 1992; ++i) r.update(false);
  CHECK(r.scale() == 32768.0f);
  r.update(false);
  CHECK(r.scale() == 65536.0f);

  LossScalerOptions o;
  o.dynamic = false;
  o.initial_scale = 4.0f;
  LossScaler fixed(o);
  fixed.restore(bytes, "ckpt/scaler.bin");
  CHECK(fixed.scale() == 4.0f);  // a static scale is the job's, not the checkpoint's
  CHECK(fixed.skipped_steps() == 1);

  CHECK_THROWS_WITH(r.restore(bytes.substr(1), "ckpt/scaler.bin"), Catch::Contains("ckpt/scaler.bin"));
  CHECK_THROWS_AS(r.restore(std::string(bytes.size(), 'x'), "ckpt"), trainer::InputError);
}
