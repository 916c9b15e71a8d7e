// Learning-rate schedules: linear warmup, then cosine, WSD, linear or constant.
#pragma once

#include "engine/config/job_spec.h"

namespace trainer::engine {

// The learning rate of optimizer step `step` (1-based) of a run of `total_steps`.
double learning_rate(const OptimizerSpec& opt, int total_steps, int step);

}  // namespace trainer::engine
