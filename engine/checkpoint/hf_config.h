// The Hugging Face architecture of a model: which transformers class computes
// exactly what this trainer's model computes, its config.json, and the check
// that a config.json describes the model a job declares (model.init_from).
#pragma once

#include <string>

#include "model/model_config.h"

namespace trainer::engine::checkpoint {

// "GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM" (a llama
// family model with model.sliding_window, its window in every layer),
// "Qwen2ForCausalLM" (a llama family
// model with q/k/v biases), "Qwen3ForCausalLM" (one with q/k norms),
// "MixtralForCausalLM" (a llama family model whose every MLP is an MoE
// without shared experts, routed by softmax top-k renormalised, as
// MixtralSparseMoeBlock), "Qwen3MoeForCausalLM" (one with q/k norms and an
// MoE in every model.moe.every-th layer, renormalised or not) or
// "DeepseekV3ForCausalLM" (one with model.mla: hf_deepseek.h). A model no
// transformers class computes is an InputError naming the job key that
// makes it so: an export would load with layers missing or misrouted (GPT-2
// blocks with model.sliding_window among them). A window is written as each
// class sets one in every layer: Mistral's and Mixtral's sliding_window, the
// Qwen classes' use_sliding_window with max_window_layers 0 and layer_types.
std::string hf_architecture(const model::ModelConfig& cfg);
// The class whose tensor names and layout cfg's model takes, without
// hf_architecture's MoE refusals (an aux_free MoE still reads Mixtral's
// tensors); a llama with both qkv_bias and qk_norm, or a GPT-2 with
// model.sliding_window, is an InputError.
std::string hf_class(const model::ModelConfig& cfg);

// The Hugging Face name of one of cfg's parameters: this trainer names its
// MoE tensors as Mixtral does (block_sparse_moe.gate, experts.E.w1/w2/w3),
// Qwen3-MoE's are mlp.gate and mlp.experts.E.gate_proj/down_proj/up_proj.
std::string hf_tensor_name(const model::ModelConfig& cfg, const std::string& ours);

// What config.json records beside the model: the weights' dtype, and the
// exported tokenizer's bos/eos ids (-1: no tokenizer; transformers' defaults
// are other vocabularies' ids, so none is written then).
struct HfConfigExtras {
  std::string torch_dtype = "float32";  // "float32", "bfloat16", "float16"
  int bos_id = -1, eos_id = -1;
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;  // > 0: fp8 blocks (hf_fp8.h), quantization_config
};

// config.json text for hf_architecture(cfg) (keys exactly as transformers names them).
std::string hf_config_json(const model::ModelConfig& cfg, const HfConfigExtras& extras = {});

// `config_path`: an HF config.json that model.init_from starts from. The first
// hyper-parameter (with transformers' defaults for keys left out) that makes
// its model differ from the job's is an InputError naming the file, the HF
// key and the job key: shapes are also checked tensor by tensor, but a
// norm epsilon, a RoPE base, a tied head, a layer count or a sliding window
// are not shapes. A job without model.sliding_window also takes a "mistral"
// config.json (Mistral 7B v0.2+ is a Llama with sliding_window null), and a
// window no narrower than model.max_seq_len (full causal attention for its
// sequences); a job with one takes only a config.json windowing every layer
// by exactly model.sliding_window keys.
void check_hf_config(const std::string& config_path, const model::ModelConfig& cfg);

}  // namespace trainer::engine::checkpoint
