// LossScaler: the fp16 loss-scale state machine and its checkpoint bytes.
#include "engine/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/error.h"

namespace trainer::engine {

namespace {

// Bytes: magic, f32 scale, i64 good, skipped, consecutive skips (native little-endian).
constexpr char kMagic[8] = {'T', 'R', 'L', 'S', 'C', 'A', 'L', '1'};
constexpr size_t kBytes = sizeof(kMagic) + sizeof(float) + 3 * sizeof(int64_t);

bool finite_positive(float x) { return std::isfinite(x) && x > 0.0f; }

}  // namespace

LossScalerOptions loss_scaler_options(const PrecisionSpec& spec) {
  LossScalerOptions o;
  o.dynamic = spec.dynamic_loss_scale;
  o.initial_scale = static_cast<float>(spec.loss_scale);
  return o;
}

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  const LossScalerOptions& o = options_;
  TRAINER_INPUT_CHECK(finite_positive(o.initial_scale),
                      "precision.loss_scale: {} is not a finite number > 0", o.initial_scale);
  if (o.dynamic) {
    TRAINER_INPUT_CHECK(o.growth_interval >= 1, "loss scaler: growth interval {} is not >= 1",
                        o.growth_interval);
    TRAINER_INPUT_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0f,
                        "loss scaler: growth factor {} is not > 1", o.growth_factor);
    TRAINER_INPUT_CHECK(o.backoff_factor > 0.0f && o.backoff_factor < 1.0f,
                        "loss scaler: backoff factor {} is not in (0, 1)", o.backoff_factor);
    TRAINER_INPUT_CHECK(finite_positive(o.min_scale) && finite_positive(o.max_scale) &&
                            o.min_scale <= o.max_scale,
                        "loss scaler: bounds [{}, {}] are not finite, > 0 and ordered",
                        o.min_scale, o.max_scale);
    TRAINER_INPUT_CHECK(o.initial_scale >= o.min_scale && o.initial_scale <= o.max_scale,
                        "precision.loss_scale: initial dynamic scale {} is outside [{}, {}]",
                        o.initial_scale, o.min_scale, o.max_scale);
  }
  scale_ = o.initial_scale;
}

void LossScaler::set_state(float scale, int64_t good, int64_t skipped, int64_t consecutive,
                           const std::string& source) {
  TRAINER_INPUT_CHECK(finite_positive(scale) && good >= 0 && skipped >= 0 && consecutive >= 0,
                      "{}: loss scale state (scale {}, counts {}, {}, {}) is invalid", source, scale,
                      good, skipped, consecutive);
  if (options_.dynamic) scale_ = scale;
  good_steps_ = good;
  skipped_steps_ = skipped;
  consecutive_skips_ = consecutive;
}

bool LossScaler::update(bool found_nonfinite) {
  if (found_nonfinite) {
    ++skipped_steps_;
    ++consecutive_skips_;
    good_steps_ = 0;
    if (options_.dynamic) scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    return true;
  }
  consecutive_skips_ = 0;
  ++good_steps_;
  if (options_.dynamic && good_steps_ >= options_.growth_interval) {
    scale_ = std::min(scale_ * options_.growth_factor, options_.max_scale);
    good_steps_ = 0;
  }
  return false;
}

std::string LossScaler::serialize() const {
  std::string out(kBytes, '\0');
  char* p = out.data();
  std::memcpy(p, kMagic, sizeof(kMagic));
  p += sizeof(kMagic);
  std::memcpy(p, &scale_, sizeof(float));
  p += sizeof(float);
  for (int64_t v : {good_steps_, skipped_steps_, consecutive_skips_}) {
    std::memcpy(p, &v, sizeof(v));
    p += sizeof(v);
  }
  return out;
}

void LossScaler::restore(std::string_view bytes, const std::string& source) {
  TRAINER_INPUT_CHECK(bytes.size() == kBytes && std::memcmp(bytes.data(), kMagic, 8) == 0,
                      "{}: not a loss scaler state ({} bytes, expected {} with its header)",
                      source, bytes.size(), kBytes);
  const char* p = bytes.data() + sizeof(kMagic);
  float scale = 0.0f;
  int64_t counts[3];
  std::memcpy(&scale, p, sizeof(float));
  std::memcpy(counts, p + sizeof(float), sizeof(counts));
  TRAINER_INPUT_CHECK(finite_positive(scale), "{}: loss scale {} is not finite > 0", source, scale);
  TRAINER_INPUT_CHECK(counts[0] >= 0 && counts[1] >= 0 && counts[2] >= 0,
                      "{}: negative loss scaler step counts", source);
  // Dynamic: the checkpoint's scale, held inside the current bounds (the job may have
  // changed them). Static: the job's number stays.
  if (options_.dynamic) scale_ = std::clamp(scale, options_.min_scale, options_.max_scale);
  good_steps_ = counts[0];
  skipped_steps_ = counts[1];
  consecutive_skips_ = counts[2];
}

}  // namespace trainer::engine
