// The bridge from the job spec to the model's own config (model/ never sees YAML).
#pragma once

#include <string>

#include "engine/config/job_spec.h"
#include "model/model_config.h"

namespace trainer::engine {

model::ModelConfig model_config(const JobSpec& spec);
// The attention's options beyond the family's own, for one-line summaries
// (`trainer plan`, `trainer inspect`), to follow "16 heads (8 kv)": " of 128,
// q/k norms", ", q/k/v biases" or "".
std::string attention_options(const ModelSpec& m);  // heads' size, biases, norms, RoPE scaling
// The MoE layers' shape and routing as `trainer plan` and `inspect` print
// them: "128 experts of 768, top-8 by softmax, renormalised, in every layer".
std::string moe_options(const MoESpec& e);
model::BatchShape micro_batch_shape(const JobSpec& spec);
// What the model needs for the device it trains on: the GPU's fp8 GEMMs pad
// ragged expert rows and keep each weight's codes for the step (not under
// ZeRO-3, which gathers a block per use; not with precision.fp8_weight_cache
// false). Trainer::setup and `trainer plan` both call it, so the plan matches.
void apply_device(model::ModelConfig& cfg, const JobSpec& spec, Device device);

}  // namespace trainer::engine
