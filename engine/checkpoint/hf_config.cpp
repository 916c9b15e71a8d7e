// See hf_config.h. Defaults are transformers' (GPT2Config, LlamaConfig,
// MistralConfig, Qwen2Config, Qwen3Config, MixtralConfig, Qwen3MoeConfig,
// Qwen2MoeConfig; DeepseekV3Config in hf_deepseek.cpp) for keys a config.json leaves out.
#include "engine/checkpoint/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>
#include <vector>
#include <stdexcept>

#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_config_check.h"
#include "engine/checkpoint/hf_deepseek.h"
#include "engine/checkpoint/hf_fp8.h"
#include "engine/checkpoint/hf_host_tensor.h"
#include "engine/json.h"
#include "kernels/error.h"

namespace trainer::engine::checkpoint {

namespace {

// The transformers class and model_type whose names and layout the job's
// model takes, and the job keys that make it so: Qwen2 is Llama with biases
// on q, k and v, Qwen3 with q/k norms instead (each with its own defaults);
// Mistral is Llama with a sliding window in every layer (Mixtral and the
// Qwen classes take one too); an MoE is Mixtral, Qwen3-MoE with q/k norms, or
// Qwen2-MoE with the biases (and its gated shared expert). No class computes
// GPT-2 blocks with a sliding window.
struct HfKind {
  const char* cls;
  const char* type;
  const char* keys;
};
HfKind hf_kind(const model::ModelConfig& cfg) {
  if (!cfg.is_llama()) {
    TRAINER_INPUT_CHECK(cfg.sliding_window <= 0, "model.sliding_window is {}: no Hugging Face class "
                        "computes GPT-2 blocks with a sliding window (a windowed model is model.family "
                        "llama: MistralForCausalLM, MixtralForCausalLM or a Qwen class)", cfg.sliding_window);
    return {"GPT2LMHeadModel", "gpt2", "model.family gpt2"};
  }
  if (cfg.mla.enabled) {
    check_deepseek_job(cfg);
    return {"DeepseekV3ForCausalLM", "deepseek_v3", "model.family llama with model.mla"};
  }
  if (cfg.moe_enabled && cfg.qk_norm) {
    TRAINER_INPUT_CHECK(cfg.full_attention_every == 0, "model.full_attention_every is {}: "
                        "Qwen3MoeForCausalLM windows every layer when it windows any",
                        cfg.full_attention_every);
    return {"Qwen3MoeForCausalLM", "qwen3_moe", "model.family llama with model.moe and model.qk_norm"};
  }
  if (cfg.moe_enabled && cfg.qkv_bias)
    return {"Qwen2MoeForCausalLM", "qwen2_moe", "model.family llama with model.moe and model.qkv_bias"};
  TRAINER_INPUT_CHECK(!cfg.moe_enabled || cfg.full_attention_every == 0, "model.full_attention_every is {}: "
                      "MixtralForCausalLM windows every layer (layers of full attention among windowed "
                      "ones are a Qwen-MoE class's layer_types: model.qkv_bias or model.qk_norm)",
                      cfg.full_attention_every);
  if (cfg.moe_enabled) return {"MixtralForCausalLM", "mixtral", "model.family llama with model.moe"};
  TRAINER_INPUT_CHECK(!(cfg.qk_norm && cfg.qkv_bias), "model.qk_norm with model.qkv_bias: no Hugging "
                      "Face class has both (Qwen2 has the biases, Qwen3 the norms)");
  if (cfg.qk_norm) return {"Qwen3ForCausalLM", "qwen3", "model.family llama with model.qk_norm"};
  if (cfg.qkv_bias) return {"Qwen2ForCausalLM", "qwen2", "model.family llama with model.qkv_bias"};
  TRAINER_INPUT_CHECK(cfg.full_attention_every == 0, "model.full_attention_every is {}: MistralForCausalLM "
                      "windows every layer (layers of full attention among windowed ones are a Qwen "
                      "class's layer_types: model.qkv_bias or model.qk_norm)", cfg.full_attention_every);
  if (cfg.sliding_window > 0)
    return {"MistralForCausalLM", "mistral", "model.family llama with model.sliding_window"};
  return {"LlamaForCausalLM", "llama", "model.family llama"};
}

// What the job would set to be a model of another model_type.
std::string hint_for(const std::string& type, const model::ModelConfig& cfg) {
  if (type == "qwen2") return ": Qwen2 is model.family llama with model.qkv_bias: true";
  if (type == "qwen3") return ": Qwen3 is model.family llama with model.qk_norm: true";
  if (type == "llama" && cfg.sliding_window > 0 && cfg.is_llama() && !cfg.moe_enabled && !cfg.qkv_bias &&
      !cfg.qk_norm)
    return fmt::format(": LlamaForCausalLM has no sliding window, but model.sliding_window is {} "
                       "(a windowed Llama is MistralForCausalLM)", cfg.sliding_window);
  if (type == "llama") return ": Llama is model.family llama without model.qkv_bias or model.qk_norm";
  if (type == "mistral")
    return ": Mistral is model.family llama without model.qkv_bias or model.qk_norm, with "
           "model.sliding_window as its sliding_window";
  if (type == "mixtral") return ": Mixtral is model.family llama with model.moe";
  if (type == "qwen3_moe") return ": Qwen3-MoE is model.family llama with model.moe and model.qk_norm: true";
  if (type == "qwen2_moe")
    return ": Qwen2-MoE is model.family llama with model.qkv_bias: true and model.moe with shared "
           "experts and shared_expert_gate: true";
  if (type == "gpt2") return ": GPT-2 is model.family gpt2";
  if (type == "deepseek_v3") return ": DeepSeek-V3 is model.family llama with model.mla";
  return "";
}

void check_gpt2(const ConfigCheck& c, const model::ModelConfig& cfg) {
  c.same_int("n_embd", 768, cfg.d_model, "model.d_model");
  c.same_int("n_layer", 12, cfg.n_layer, "model.n_layer");
  c.same_int("n_head", 12, cfg.n_head, "model.n_head");
  c.same_int("n_inner", 4 * c.number("n_embd", 768), cfg.d_ff, "model.d_ff");
  c.same_int("vocab_size", 50257, cfg.vocab_size, "model.vocab_size");
  double positions = c.number("n_positions", 1024);
  c.require(positions >= cfg.max_seq_len, "n_positions is {}, below model.max_seq_len {}", positions,
            cfg.max_seq_len);
  c.same_float("layer_norm_epsilon", 1e-5, cfg.norm_eps, "model.norm_eps");
  c.same_flag("tie_word_embeddings", true, cfg.tie_embeddings, "model.tie_embeddings");
  std::string act = c.text("activation_function", "gelu_new");
  c.require(act == "gelu_new" || act == "gelu_pytorch_tanh",
            "activation_function is \"{}\": this trainer's GPT-2 computes the tanh approximation "
            "(gelu_new)", act);
  c.off("scale_attn_by_inverse_layer_idx", "this trainer scales attention by 1/sqrt(head_dim) only");
}

// transformers' defaults for the keys a config.json may leave out.
struct LlamaLikeDefaults {
  double vocab, intermediate, norm_eps, theta;
  double head_dim;  // 0: hidden_size / num_attention_heads
  double hidden = 4096, layers = 32, heads = 32;
  double kv_heads = 0;  // 0: num_attention_heads
};

LlamaLikeDefaults llama_like_defaults(const std::string& type) {
  if (type == "mixtral") return {32000, 14336, 1e-5, 1e6, 0, 4096, 32, 32, 8};
  if (type == "mistral") return {32000, 14336, 1e-6, 1e4, 0, 4096, 32, 32, 8};
  if (type == "qwen2") return {151936, 22016, 1e-6, 1e4, 0};
  if (type == "qwen3") return {151936, 22016, 1e-6, 1e4, 128};
  if (type == "qwen3_moe") return {151936, 6144, 1e-6, 1e4, 0, 2048, 24, 32, 4};
  if (type == "qwen2_moe") return {151936, 5632, 1e-6, 1e4, 0, 2048, 24, 16, 16};
  return {32000, 11008, 1e-6, 1e4, 0};
}

// The MoE keys: Mixtral's (an MoE in every layer) or Qwen3-MoE's and
// Qwen2-MoE's (every decoder_sparse_step-th layer, the others dense; top-k
// renormalised or not; Qwen2-MoE's gated shared expert).
void check_moe(const ConfigCheck& c, const model::ModelConfig& cfg, const std::string& type,
               const LlamaLikeDefaults& d) {
  const bool qwen2 = type == "qwen2_moe";
  if (qwen2) {
    // One shared expert of shared_expert_intermediate_size: this trainer's
    // n_shared_experts x d_ff_expert wide MLP, gated.
    c.require(cfg.moe.n_shared_experts > 0 && cfg.moe.shared_gate,
              "a Qwen2-MoE model has a shared expert gated by shared_expert_gate, but "
              "model.moe.n_shared_experts is {} and model.moe.shared_expert_gate {}",
              cfg.moe.n_shared_experts, cfg.moe.shared_gate);
    c.same_int("shared_expert_intermediate_size", 5632,
               int64_t{cfg.moe.n_shared_experts} * cfg.moe.d_ff_expert,
               "model.moe.n_shared_experts x model.moe.d_ff_expert");
    c.require(c.flag("qkv_bias", true), "qkv_bias is false: this trainer's Qwen2-MoE has q/k/v biases");
  } else {
    c.require(cfg.moe.n_shared_experts == 0, "a {} model has no shared experts, but "
              "model.moe.n_shared_experts is {}", type, cfg.moe.n_shared_experts);
  }
  c.require(!cfg.moe.sigmoid, "a {} model routes by softmax, but model.moe.score is sigmoid", type);
  c.require(cfg.moe.topk_scaling == 1.0f, "a {} model combines the experts by their routing "
            "weights alone, but model.moe.topk_scaling_factor is {}", type, cfg.moe.topk_scaling);
  c.require(cfg.moe.n_groups == 1, "a {} model routes over all its experts, but model.moe.n_groups "
            "is {}", type, cfg.moe.n_groups);
  if (type == "mixtral") {
    c.require(cfg.moe_every == 1, "a Mixtral model has an MoE in every layer, but model.moe.every is {}",
              cfg.moe_every);
    c.require(cfg.moe_first_dense == 0, "a Mixtral model has an MoE in every layer, but "
              "model.moe.first_dense is {}", cfg.moe_first_dense);
    c.require(cfg.moe.normalize_topk, "a Mixtral model renormalises its top-k weights, but "
              "model.moe.normalize_topk is false");
    c.same_int("intermediate_size", d.intermediate, cfg.moe.d_ff_expert, "model.moe.d_ff_expert");
    c.same_int("num_local_experts", 8, cfg.moe.n_experts, "model.moe.n_experts");
    c.same_int("num_experts_per_tok", 2, cfg.moe.top_k, "model.moe.top_k");
    return;
  }
  c.same_int("moe_intermediate_size", qwen2 ? 1408 : 768, cfg.moe.d_ff_expert, "model.moe.d_ff_expert");
  c.same_int("num_experts", qwen2 ? 60 : 128, cfg.moe.n_experts, "model.moe.n_experts");
  c.same_int("num_experts_per_tok", qwen2 ? 4 : 8, cfg.moe.top_k, "model.moe.top_k");
  c.same_flag("norm_topk_prob", false, cfg.moe.normalize_topk, "model.moe.normalize_topk");
  c.same_int("decoder_sparse_step", 1, cfg.moe_every, "model.moe.every");
  // mlp_only_layers: the first model.moe.first_dense layers, or none.
  const Json* only = c.get("mlp_only_layers");
  bool prefix = !only || only->is_array();
  int64_t n = 0;
  for (size_t i = 0; prefix && only && i < only->items().size(); ++i, ++n) {
    const Json& l = only->items()[i];
    prefix = l.is_number() && l.as_number() == static_cast<double>(i);
  }
  c.require(prefix, "mlp_only_layers is {}: this trainer's dense layers are the first "
            "model.moe.first_dense ones and those model.moe.every skips", only ? only->dump() : "");
  if (prefix)
    c.require(n == cfg.moe_first_dense, "mlp_only_layers holds the first {} layers, but "
              "model.moe.first_dense is {}", n, cfg.moe_first_dense);
  if (cfg.has_dense_mlp())  // the dense layers' MLP
    c.same_int("intermediate_size", d.intermediate, cfg.d_ff, "model.d_ff");
}

// Hugging Face's rope_type of a scaling.
const char* rope_type_name(RopeKind kind) {
  return kind == RopeKind::linear ? "linear" : kind == RopeKind::yarn ? "yarn" : "llama3";
}

// rope_type ("default" when there is no scaling) from rope_scaling or
// transformers 5's rope_parameters (`key`), against model.rope_scaling.
void check_rope_scaling(const ConfigCheck& c, const model::ModelConfig& cfg, const std::string& rope_type,
                        const std::string& key) {
  const RopeScaling& ours = cfg.rope_scaling;
  const std::string our_type = ours.active() ? rope_type_name(ours.kind) : "default";
  if (rope_type != "default" && rope_type != "llama3" && rope_type != "linear" && rope_type != "yarn") {
    c.require(false, "RoPE scaling \"{}\": this trainer computes plain RoPE or the llama3, linear and "
              "yarn scalings", rope_type);
    return;
  }
  if (rope_type != our_type) {
    if (rope_type == "default")
      c.require(false, "plain RoPE, but model.rope_scaling is set");
    else if (!ours.active())
      c.require(false, "{} is {}{} scaling, but the job has no model.rope_scaling", key,
                rope_type == "llama3" ? "Llama 3.1's " : "", rope_type);
    else
      c.require(false, "{}.rope_type is {}, but model.rope_scaling.type is {}", key, rope_type, our_type);
    return;
  }
  if (rope_type == "default") return;
  const ConfigCheck s = c.member(key);
  if (rope_type == "linear") {
    s.same_float("factor", 1.0, ours.factor, "model.rope_scaling.factor");
    return;
  }
  if (rope_type == "llama3") {
    s.same_float("factor", 8.0, ours.factor, "model.rope_scaling.factor");
    s.same_float("low_freq_factor", 1.0, ours.low_freq_factor, "model.rope_scaling.low_freq_factor");
    s.same_float("high_freq_factor", 4.0, ours.high_freq_factor, "model.rope_scaling.high_freq_factor");
    s.same_int("original_max_position_embeddings", 8192, static_cast<int64_t>(ours.original_max_positions),
               "model.rope_scaling.original_max_position_embeddings");
    return;
  }
  // YaRN. transformers 4 takes max_position_embeddings / original as the
  // factor when the original is given, 5 the factor: they must agree.
  const double positions = c.number("max_position_embeddings", 0);
  const double original = s.number("original_max_position_embeddings", positions);
  const double factor = s.number("factor", 1.0);
  if (s.get("original_max_position_embeddings") && positions > 0)
    s.require(std::fabs(positions / original - factor) <= 1e-6 * factor,
              "max_position_embeddings {} / {}.original_max_position_embeddings {} is not {}.factor {}: "
              "transformers 4 and 5 would compute different YaRN frequencies", positions, key, original,
              key, factor);
  s.same_float("factor", 1.0, ours.factor, "model.rope_scaling.factor");
  s.same_int("original_max_position_embeddings", positions, static_cast<int64_t>(ours.original_max_positions),
             "model.rope_scaling.original_max_position_embeddings");
  s.same_float("beta_fast", 32.0, ours.beta_fast, "model.rope_scaling.beta_fast");
  s.same_float("beta_slow", 1.0, ours.beta_slow, "model.rope_scaling.beta_slow");
  // DeepSeek's pair: transformers reads mscale only beside mscale_all_dim.
  const double mscale = s.number("mscale", 0.0), mscale_all_dim = s.number("mscale_all_dim", 0.0);
  s.same_float("mscale", 0.0, ours.mscale, "model.rope_scaling.mscale");
  s.same_float("mscale_all_dim", 0.0, ours.mscale_all_dim, "model.rope_scaling.mscale_all_dim");
  s.same_float("attention_factor",
               mscale > 0 && mscale_all_dim > 0
                   ? yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
                   : yarn_mscale(factor, 1.0),
               ours.attention_factor, "model.rope_scaling.attention_factor");
  const Json* truncate = s.get("truncate");
  s.require(!truncate || (truncate->kind() == Json::Kind::boolean && truncate->as_bool()),
            "{}.truncate is {}: this trainer rounds YaRN's ramp ends as truncate: true", key,
            truncate ? truncate->dump() : "");
}

// Sliding windows. The job's model.sliding_window W is every layer's: a
// query sees itself and the W - 1 keys before it, as transformers'
// sliding_window_overlay (kv > q - W). A window no narrower than
// model.max_seq_len is full causal attention for every sequence the job has,
// so a job without one takes it too (as this trainer did before it had windows).
std::string job_window(const model::ModelConfig& cfg) {
  return cfg.sliding_window > 0 ? fmt::format("model.sliding_window is {}", cfg.sliding_window)
                                : std::string("model.sliding_window is null (full causal attention)");
}

std::string window_text(double w) { return w > 0 ? fmt::format("{}", w) : std::string("null"); }

// "layer 3", "layers 0, 2, 4", "layers 0, 1, 2, 3, ... (24 of them)".
std::string layer_list(const std::vector<int64_t>& layers) {
  std::vector<int64_t> shown(layers.begin(), layers.begin() + std::min<size_t>(layers.size(), 4));
  if (layers.size() == 1) return fmt::format("layer {}", layers[0]);
  if (layers.size() <= 4) return fmt::format("layers {}", fmt::join(shown, ", "));
  return fmt::format("layers {}, ... ({} of them)", fmt::join(shown, ", "), layers.size());
}

// Mistral's and Mixtral's sliding_window: every layer's (MistralConfig's
// default 4096 when left out, MixtralConfig's none).
void check_window(const ConfigCheck& c, const model::ModelConfig& cfg, double fallback) {
  const double theirs = c.window("sliding_window", fallback);
  if (cfg.sliding_window > 0)
    c.require(theirs == static_cast<double>(cfg.sliding_window), "sliding_window is {}{}, but {}",
              window_text(theirs), theirs > 0 ? "" : " (full causal attention)", job_window(cfg));
  else
    c.require(theirs <= 0 || theirs >= cfg.max_seq_len, "sliding_window is {}, below model.max_seq_len {}, "
              "but {}", theirs, cfg.max_seq_len, job_window(cfg));
}

// The Qwen classes window layers by use_sliding_window (off: none),
// sliding_window (default 4096) and which layers, as transformers 5 reads
// them: Qwen2 and Qwen3 by layer_types when given, else the layers from
// max_window_layers (default 28) on; Qwen2-MoE by layer_types when given,
// else the even layers below max_window_layers; Qwen3-MoE every layer.
// (transformers 4.x read these otherwise, by version and attention backend;
// an export gives max_window_layers 0 and layer_types both, on which every
// reading is a window in every layer.)
void check_qwen_window(const ConfigCheck& c, const model::ModelConfig& cfg, const std::string& type,
                       const LlamaLikeDefaults& d) {
  const bool on = c.flag("use_sliding_window", false);
  const double window = on ? c.window("sliding_window", 4096) : 0;
  const int64_t W = cfg.sliding_window, n = cfg.n_layer;
  const double from = c.number("max_window_layers", 28);
  // Which of the job's layers the config windows, and by what.
  std::vector<bool> windowed(static_cast<size_t>(n), false);
  std::string rule;
  const Json* types = c.get("layer_types");
  if (type == "qwen3_moe") {
    windowed.assign(windowed.size(), true);
    rule = "Qwen3-MoE windows every layer";
  } else if (types) {
    rule = "layer_types";
    const double layers = c.number("num_hidden_layers", d.layers);
    if (!types->is_array() || static_cast<double>(types->items().size()) != layers) {
      c.require(false, "layer_types is {}: expected a list of num_hidden_layers {} layer types",
                types->dump(), layers);
      return;
    }
    for (size_t i = 0; i < types->items().size(); ++i) {
      const Json& t = types->items()[i];
      const bool sliding = t.is_string() && t.as_string() == "sliding_attention";
      if (!sliding && !(t.is_string() && t.as_string() == "full_attention")) {
        c.require(false, "layer_types[{}] is {}: this trainer computes full_attention and "
                  "sliding_attention layers", i, t.dump());
        return;
      }
      if (i < windowed.size()) windowed[i] = sliding;
    }
  } else if (type == "qwen2_moe") {
    for (int64_t i = 0; i < n; ++i) windowed[static_cast<size_t>(i)] = i % 2 == 0 && i < from;
    rule = fmt::format("no layer_types, and max_window_layers is {}: Qwen2-MoE windows the even layers "
                       "below it", from);
  } else {
    for (int64_t i = 0; i < n; ++i) windowed[static_cast<size_t>(i)] = i >= from;
    rule = fmt::format("max_window_layers is {}: the layers from it on are windowed", from);
  }
  std::vector<int64_t> sliding;
  for (int64_t i = 0; i < n; ++i)
    if (windowed[static_cast<size_t>(i)]) sliding.push_back(i);
  if (W > 0) {
    const int N = cfg.full_attention_every;
    const std::string want =
        N > 0 ? fmt::format("but model.sliding_window is {} in every layer but layers {}, {}, ... "
                            "(model.full_attention_every {})", W, N, 2 * N, N)
              : fmt::format("but model.sliding_window is {} in every layer", W);
    if (!on) {
      c.require(false, "use_sliding_window is false (full causal attention), {}", want);
    } else if (window <= 0) {
      c.require(false, "sliding_window is null (full causal attention), {}", want);
    } else {
      c.require(window == static_cast<double>(W), "sliding_window is {}, but {}", window, job_window(cfg));
      // The layers the config leaves in full and the job windows, and the reverse.
      std::vector<int64_t> unwindowed, overwindowed;
      for (int64_t i = 0; i < n; ++i) {
        const bool job = cfg.window_of(static_cast<int>(i)) > 0;
        if (job && !windowed[static_cast<size_t>(i)]) unwindowed.push_back(i);
        if (!job && windowed[static_cast<size_t>(i)]) overwindowed.push_back(i);
      }
      const char* fix = N > 0 ? " (layer_types: \"full_attention\" for those layers, \"sliding_attention\" "
                                "for the rest)"
                        : types || type == "qwen2_moe" ? " (layer_types: all \"sliding_attention\")"
                                                       : " (max_window_layers: 0)";
      c.require(unwindowed.empty(), "{}: {} attend{} in full, {}{}", rule, layer_list(unwindowed),
                unwindowed.size() == 1 ? "s" : "", want, fix);
      c.require(overwindowed.empty(), "{}: {} {} windowed, {}{}", rule, layer_list(overwindowed),
                overwindowed.size() == 1 ? "is" : "are", want, fix);
    }
    return;
  }
  if (on && window > 0 && window < cfg.max_seq_len && !sliding.empty())
    c.require(false, "use_sliding_window is true with sliding_window {}, below model.max_seq_len {}, in {} "
              "({}), but {}", window, cfg.max_seq_len, layer_list(sliding), rule, job_window(cfg));
}

void check_llama_like(const ConfigCheck& c, const model::ModelConfig& cfg, const std::string& type) {
  const bool moe = type == "mixtral" || type == "qwen3_moe" || type == "qwen2_moe";
  const LlamaLikeDefaults d = llama_like_defaults(type);
  c.same_int("hidden_size", d.hidden, cfg.d_model, "model.d_model");
  c.same_int("num_hidden_layers", d.layers, cfg.n_layer, "model.n_layer");
  c.same_int("num_attention_heads", d.heads, cfg.n_head, "model.n_head");
  const double heads = c.number("num_attention_heads", d.heads);
  c.same_int("num_key_value_heads", d.kv_heads > 0 ? d.kv_heads : heads, cfg.n_kv_head, "model.n_kv_head");
  c.same_int("head_dim", d.head_dim > 0 ? d.head_dim : c.number("hidden_size", d.hidden) / heads,
             cfg.head_dim(), "model.head_dim");
  c.same_int("vocab_size", d.vocab, cfg.vocab_size, "model.vocab_size");
  c.same_float("rms_norm_eps", d.norm_eps, cfg.norm_eps, "model.norm_eps");
  check_rope(c, cfg, d.theta);
  c.same_flag("tie_word_embeddings", false, cfg.tie_embeddings, "model.tie_embeddings");
  std::string act = c.text("hidden_act", "silu");
  c.require(act == "silu", "hidden_act is \"{}\": this trainer's llama computes SwiGLU (silu)", act);
  // Llama's attention_bias also puts one on o_proj, which Qwen2 and this trainer have not.
  c.off("attention_bias", "this trainer's llama attention has no o_proj bias (Qwen2's q, k and v "
                          "biases alone are model.qkv_bias)");
  c.off("mlp_bias", "this trainer's llama MLP has no biases");
  if (type == "mistral" || type == "mixtral")
    check_window(c, cfg, type == "mistral" ? 4096 : 0);
  else if (type != "llama")
    check_qwen_window(c, cfg, type, d);
  if (moe)
    check_moe(c, cfg, type, d);
  else
    c.same_int("intermediate_size", d.intermediate, cfg.d_ff, "model.d_ff");
}

}  // namespace

void check_rope(const ConfigCheck& c, const model::ModelConfig& cfg, double theta) {
  // transformers 5 keeps the RoPE base and scaling in rope_parameters, 4.x
  // in rope_theta and rope_scaling.
  std::string rope_type = "default", scaling_key;
  if (const Json* rp = c.get("rope_parameters"); rp && rp->is_object()) {
    if (const Json* t = rp->find("rope_theta"); t && t->is_number()) theta = t->as_number();
    if (const Json* t = rp->find("rope_type"); t && t->is_string()) rope_type = t->as_string();
    scaling_key = "rope_parameters";
  }
  c.same_float("rope_theta", theta, cfg.rope_theta, "model.rope_theta");
  if (const Json* rs = c.get("rope_scaling"); rs && rs->is_object())
    if (const Json* t = rs->find("rope_type") ? rs->find("rope_type") : rs->find("type"); t && t->is_string()) {
      rope_type = t->as_string();
      scaling_key = "rope_scaling";
    }
  check_rope_scaling(c, cfg, rope_type, scaling_key);
}

// config.json's rope_scaling for an active scaling.
Json rope_scaling_json(const RopeScaling& rs) {
  Json scaling = Json::object();
  scaling.set("rope_type", Json(rope_type_name(rs.kind)));
  scaling.set("factor", Json::real(rs.factor));
  if (rs.kind == RopeKind::llama3) {
    scaling.set("low_freq_factor", Json::real(rs.low_freq_factor));
    scaling.set("high_freq_factor", Json::real(rs.high_freq_factor));
  }
  if (rs.kind != RopeKind::linear)
    scaling.set("original_max_position_embeddings", Json(static_cast<int64_t>(rs.original_max_positions)));
  if (rs.kind == RopeKind::yarn) {
    scaling.set("beta_fast", Json::real(rs.beta_fast));
    scaling.set("beta_slow", Json::real(rs.beta_slow));
    scaling.set("attention_factor", Json::real(rs.attention_factor));
    if (rs.mscale > 0) scaling.set("mscale", Json::real(rs.mscale));
    if (rs.mscale_all_dim > 0) scaling.set("mscale_all_dim", Json::real(rs.mscale_all_dim));
  }
  return scaling;
}

int64_t max_position_embeddings(const model::ModelConfig& cfg) {
  const RopeScaling& rope = cfg.rope_scaling;
  if (rope.active() && rope.kind == RopeKind::yarn)
    return static_cast<int64_t>(std::llround(rope.factor * rope.original_max_positions));
  return cfg.max_seq_len;
}

std::string hf_architecture(const model::ModelConfig& cfg) {
  // YaRN's max_position_embeddings (factor x original) is a count of positions.
  if (const RopeScaling& r = cfg.rope_scaling; r.active() && r.kind == RopeKind::yarn) {
    const double positions = r.factor * r.original_max_positions;
    TRAINER_INPUT_CHECK(positions == std::floor(positions), "model.rope_scaling: factor {} x "
                        "original_max_position_embeddings {} = {} is not a whole number of positions "
                        "(config.json's max_position_embeddings, which transformers 4 divides by the "
                        "original to get the factor)", r.factor, r.original_max_positions, positions);
  }
  // DeepSeek-V3's routing is checked whole by hf_kind: the refusals below are Mixtral's and Qwen's.
  if (!cfg.moe_enabled || cfg.mla.enabled) return hf_kind(cfg).cls;
  TRAINER_INPUT_CHECK(cfg.is_llama(), "model.moe: GPT-2 blocks with MoE layers are no Hugging Face "
                      "architecture (MoE exports as MixtralForCausalLM, Qwen3MoeForCausalLM or "
                      "Qwen2MoeForCausalLM, from family llama)");
  TRAINER_INPUT_CHECK(!(cfg.qk_norm && cfg.qkv_bias), "model.qk_norm with model.qkv_bias: no Hugging "
                      "Face MoE class has both (Qwen2-MoE has the biases, Qwen3-MoE the norms)");
  const std::string cls = hf_kind(cfg).cls;
  const bool qwen = cfg.qk_norm || cfg.qkv_bias;  // Qwen3-MoE or Qwen2-MoE
  // Qwen's decoder_sparse_step is model.moe.every (dense MLPs between).
  TRAINER_INPUT_CHECK(cfg.moe_every == 1 || qwen, "model.moe.every is {}: MixtralForCausalLM "
                      "has an MoE in every layer (every: 1)", cfg.moe_every);
  TRAINER_INPUT_CHECK(cfg.moe_first_dense == 0 || qwen, "model.moe.first_dense is {}: "
                      "MixtralForCausalLM has an MoE in every layer", cfg.moe_first_dense);
  TRAINER_INPUT_CHECK(cfg.moe.topk_scaling == 1.0f, "model.moe.topk_scaling_factor is {}: {} "
                      "combines the experts by their routing weights alone", cfg.moe.topk_scaling, cls);
  if (cfg.qkv_bias) {
    TRAINER_INPUT_CHECK(cfg.moe.n_shared_experts > 0 && cfg.moe.shared_gate,
                        "model.moe.n_shared_experts {} and shared_expert_gate {}: an MoE with "
                        "model.qkv_bias exports as Qwen2MoeForCausalLM, whose shared expert is "
                        "gated (shared experts and shared_expert_gate: true)",
                        cfg.moe.n_shared_experts, cfg.moe.shared_gate);
  } else {
    TRAINER_INPUT_CHECK(cfg.moe.n_shared_experts == 0, "model.moe.n_shared_experts is {}: {} has no "
                        "shared experts (a gated one exports as Qwen2MoeForCausalLM, with "
                        "model.qkv_bias)", cfg.moe.n_shared_experts, cls);
  }
  TRAINER_INPUT_CHECK(cfg.moe.balance != model::MoeBalance::aux_free,
                      "model.moe.balance is aux_free: its learned expert bias chooses experts, and {} "
                      "routes by the router's scores alone", cls);
  TRAINER_INPUT_CHECK(!cfg.moe.sigmoid, "model.moe.score is sigmoid: {} routes by softmax top-k", cls);
  TRAINER_INPUT_CHECK(cfg.moe.n_groups == 1, "model.moe.n_groups is {}: {} routes over all its "
                      "experts (no group-limited routing)", cfg.moe.n_groups, cls);
  // Qwen3-MoE renormalises or not (norm_topk_prob); Mixtral always does.
  TRAINER_INPUT_CHECK(cfg.moe.normalize_topk || qwen,
                      "model.moe.normalize_topk is false: MixtralForCausalLM renormalises its top-k "
                      "weights");
  return cls;
}

std::string hf_class(const model::ModelConfig& cfg) { return hf_kind(cfg).cls; }

std::string hf_tensor_name(const model::ModelConfig& cfg, const std::string& ours) {
  const std::string moe = ".block_sparse_moe.";
  const size_t at = ours.find(moe);
  const std::string type = hf_kind(cfg).type;
  if (at == std::string::npos || (type != "qwen3_moe" && type != "qwen2_moe" && type != "deepseek_v3"))
    return ours;
  std::string rest = ours.substr(at + moe.size());
  // Qwen2-MoE's one shared expert: shared_expert.{gate,up,down}_proj
  // (DeepSeek-V3's are shared_experts., as ours).
  if (type == "qwen2_moe" && rest.rfind("shared_experts.", 0) == 0) rest = "shared_expert." + rest.substr(15);
  for (const auto& [mixtral, qwen] : {std::pair<std::string, std::string>{".w1.weight", ".gate_proj.weight"},
                                      {".w2.weight", ".down_proj.weight"},
                                      {".w3.weight", ".up_proj.weight"}})
    if ((rest.rfind("experts.", 0) == 0 || rest.rfind("shared_expert", 0) == 0) && ends_with(rest, mixtral))
      rest = rest.substr(0, rest.size() - mixtral.size()) + qwen;
  return ours.substr(0, at) + ".mlp." + rest;
}

std::string hf_config_json(const model::ModelConfig& cfg, const HfConfigExtras& extras) {
  const std::string arch_name = hf_architecture(cfg);
  Json j = Json::object();
  auto arch = Json::array();
  arch.push(Json(arch_name));
  j.set("architectures", std::move(arch));
  if (cfg.mla.enabled) {
    deepseek_config(cfg, j);
  } else if (cfg.is_llama()) {
    const std::string type = hf_kind(cfg).type;
    const bool mixtral = type == "mixtral";
    j.set("model_type", Json(type));
    j.set("vocab_size", Json(cfg.vocab_size));
    j.set("hidden_size", Json(cfg.d_model));
    j.set("intermediate_size", Json(mixtral ? cfg.moe.d_ff_expert : cfg.d_ff));
    j.set("num_hidden_layers", Json(cfg.n_layer));
    j.set("num_attention_heads", Json(cfg.n_head));
    j.set("num_key_value_heads", Json(cfg.n_kv_head));
    j.set("head_dim", Json(cfg.head_dim()));
    j.set("hidden_act", Json("silu"));
    j.set("max_position_embeddings", Json(max_position_embeddings(cfg)));
    j.set("rms_norm_eps", Json::real(tidy(cfg.norm_eps)));
    j.set("rope_theta", Json::real(tidy(cfg.rope_theta)));
    if (const RopeScaling& rs = cfg.rope_scaling; rs.active()) j.set("rope_scaling", rope_scaling_json(rs));
    if (cfg.moe_enabled) {
      j.set("num_experts_per_tok", Json(cfg.moe.top_k));
      j.set("output_router_logits", Json(false));
      j.set("router_aux_loss_coef", Json::real(cfg.moe.balance == model::MoeBalance::aux_loss
                                             ? tidy(cfg.moe.aux_loss_coeff)
                                             : 0.0));
    }
    const int64_t window = cfg.sliding_window;
    if (type == "mistral") j.set("sliding_window", Json(window));  // every layer's
    if (mixtral) {
      j.set("sliding_window", window > 0 ? Json(window) : Json());
      j.set("num_local_experts", Json(cfg.moe.n_experts));
      j.set("router_jitter_noise", Json::real(0.0));
    } else if (type == "qwen2" || type == "qwen3" || type == "qwen3_moe" || type == "qwen2_moe") {
      if (window > 0) {
        // A window in every layer, in every transformers version's reading:
        // max_window_layers 0 (4.x: the layers from it on), layer_types (5:
        // Qwen2-MoE would window only the even layers below max_window_layers).
        // With model.full_attention_every only layer_types says which layers
        // attend in full (transformers before layer_types would window all).
        j.set("use_sliding_window", Json(true));
        j.set("sliding_window", Json(window));
        j.set("max_window_layers", Json(int64_t{0}));
        Json types = Json::array();
        for (int l = 0; l < cfg.n_layer; ++l)
          types.push(Json(cfg.window_of(l) > 0 ? "sliding_attention" : "full_attention"));
        j.set("layer_types", std::move(types));
      } else {
        // Full attention in every layer, in every transformers version's reading.
        j.set("use_sliding_window", Json(false));
        j.set("sliding_window", Json());
        j.set("max_window_layers", Json(cfg.n_layer));
      }
      if (type == "qwen3" || type == "qwen3_moe") j.set("attention_bias", Json(false));
      if (type == "qwen2_moe") {
        j.set("qkv_bias", Json(true));  // transformers 5's key; 4.x's attention always has them
        j.set("shared_expert_intermediate_size",
              Json(int64_t{cfg.moe.n_shared_experts} * cfg.moe.d_ff_expert));
      }
      if (type == "qwen3_moe" || type == "qwen2_moe") {
        j.set("num_experts", Json(cfg.moe.n_experts));
        j.set("moe_intermediate_size", Json(cfg.moe.d_ff_expert));
        j.set("norm_topk_prob", Json(cfg.moe.normalize_topk));
        j.set("decoder_sparse_step", Json(cfg.moe_every));
        Json dense = Json::array();
        for (int l = 0; l < cfg.moe_first_dense; ++l) dense.push(Json(l));
        j.set("mlp_only_layers", std::move(dense));
      }
    } else if (type == "llama") {  // MistralConfig has neither key
      j.set("attention_bias", Json(false));
      j.set("mlp_bias", Json(false));
    }
  } else {
    j.set("model_type", Json("gpt2"));
    j.set("vocab_size", Json(cfg.vocab_size));
    j.set("n_positions", Json(cfg.max_seq_len));
    j.set("n_ctx", Json(cfg.max_seq_len));
    j.set("n_embd", Json(cfg.d_model));
    j.set("n_layer", Json(cfg.n_layer));
    j.set("n_head", Json(cfg.n_head));
    j.set("n_inner", Json(cfg.d_ff));
    j.set("activation_function", Json("gelu_new"));  // the tanh approximation kernels/gelu.h uses
    j.set("layer_norm_epsilon", Json::real(tidy(cfg.norm_eps)));
    j.set("resid_pdrop", Json::real(0.0));
    j.set("embd_pdrop", Json::real(0.0));
    j.set("attn_pdrop", Json::real(0.0));
    j.set("scale_attn_weights", Json(true));
  }
  if (extras.bos_id >= 0) j.set("bos_token_id", Json(extras.bos_id));
  if (extras.eos_id >= 0) j.set("eos_token_id", Json(extras.eos_id));
  j.set("tie_word_embeddings", Json(cfg.tie_embeddings));
  j.set("initializer_range", Json::real(tidy(cfg.init_std)));
  j.set("torch_dtype", Json(extras.torch_dtype));
  if (extras.fp8_block_rows > 0)
    j.set("quantization_config", fp8_quantization_config(cfg, extras.fp8_block_rows, extras.fp8_block_cols));
  return j.dump(2) + "\n";
}

void check_hf_config(const std::string& config_path, const model::ModelConfig& cfg) {
  ConfigCheck c(config_path);
  const HfKind want = hf_kind(cfg);
  const std::string type = c.text("model_type", "");
  // Mistral 7B v0.2 and later are Llamas (sliding_window null): a job without
  // a window takes a mistral config.json, its window checked as any other key.
  const bool llama_mistral = std::string(want.type) == "llama" && type == "mistral";
  TRAINER_INPUT_CHECK(type == want.type || llama_mistral, "{}: model_type is \"{}\", but the job's model is "
                      "{} ({}){} (model.init_from)", config_path, type, want.type, want.keys,
                      hint_for(type, cfg));
  if (type == "gpt2") {
    check_gpt2(c, cfg);
  } else if (type == "deepseek_v3") {
    check_deepseek_config(c, cfg);
  } else {
    check_llama_like(c, cfg, type);
  }
  check_quantization(c);
  c.finish();
}

}  // namespace trainer::engine::checkpoint
