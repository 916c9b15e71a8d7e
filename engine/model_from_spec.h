// The bridge from the job spec to the model's own config (model/ never sees YAML).
#pragma once

#include "engine/config/job_spec.h"
#include "model/model_config.h"

namespace trainer::engine {

model::ModelConfig model_config(const JobSpec& spec);
model::BatchShape micro_batch_shape(const JobSpec& spec);

}  // namespace trainer::engine
