// DeepSeek-V3 (transformers' DeepseekV3ForCausalLM): the llama family with
// model.mla, its MLPs dense for the first model.moe.first_dense layers
// (first_k_dense_replace) and DeepSeek's MoE after them (sigmoid router with
// the aux_free expert bias as e_score_correction_bias, group-limited top-k,
// routed_scaling_factor, ungated shared experts). hf_config.cpp dispatches
// here for its config.json, hf_interop.cpp and hf_export.cpp for the one
// layout difference: the checkpoints DeepSeek publishes (rope_interleave:
// true, transformers' default) store each RoPE part's rows as interleaved
// pairs, this trainer's as rotate-half halves.
#pragma once

#include <string>

#include "engine/checkpoint/hf_config_check.h"
#include "engine/checkpoint/hf_host_tensor.h"
#include "engine/json.h"
#include "model/model_config.h"

namespace trainer::engine::checkpoint {

// An InputError naming the job key that makes cfg's model (model.mla set)
// compute what DeepseekV3ForCausalLM does not.
void check_deepseek_job(const model::ModelConfig& cfg);

// config.json's DeepSeek-V3 keys (the caller adds the common tail).
void deepseek_config(const model::ModelConfig& cfg, Json& j);

// A DeepSeek-V3 config.json against the job's model (DeepseekV3Config's
// defaults for keys left out).
void check_deepseek_config(const ConfigCheck& c, const model::ModelConfig& cfg);

// What a DeepSeek-V3 source's config.json says about its tensors (transformers'
// defaults without one): whether the RoPE rows are interleaved, and how many
// multi-token-prediction layers follow the decoder's (num_nextn_predict_layers:
// the hub's DeepSeek-V3 holds model.layers.61, which transformers skips too).
struct DeepseekSource {
  bool rope_interleave = true;
  int64_t mtp_layers = 0;
};
DeepseekSource deepseek_source(const std::string& path);

// `t`, our parameter `ours` (global, (out, in)), with the rows of its RoPE
// parts (each q head's last qk_rope_head_dim rows of q_b_proj or q_proj,
// kv_a_proj_with_mqa's last qk_rope_head_dim) reordered to interleaved pairs
// (to_hf) or from them; any other tensor (and any model without mla) as it is.
HostTensor deepseek_rope_rows(const model::ModelConfig& cfg, const std::string& ours, HostTensor t,
                              bool to_hf);

}  // namespace trainer::engine::checkpoint
