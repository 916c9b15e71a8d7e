// Which Hugging Face architecture a model exports as (or why none), and the
// model.init_from check of an HF config.json against the job's model: every
// hyper-parameter that changes the function is named when it differs, and
// keys left out take transformers' defaults.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_config.h"
#include "engine/json.h"
#include "engine/model_from_spec.h"
#include "kernels/error.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::engine::checkpoint;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

model::ModelConfig llama_cfg() {
  model::ModelConfig c;
  c.family = model::Family::llama;
  c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.n_kv_head = 2, c.d_ff = 48;
  c.vocab_size = 200, c.max_seq_len = 16, c.tie_embeddings = false;
  c.rope_theta = 500000.0f, c.norm_eps = 1e-6f;
  return c;
}

model::ModelConfig qwen2_cfg() {
  model::ModelConfig c = llama_cfg();
  c.qkv_bias = c.tie_embeddings = true;
  return c;
}

model::ModelConfig qwen3_cfg() {
  model::ModelConfig c = llama_cfg();
  c.qk_norm = c.tie_embeddings = true;
  return c;
}

model::ModelConfig mixtral_cfg() {
  model::ModelConfig c = llama_cfg();
  c.moe_enabled = true;
  c.moe.n_experts = 4, c.moe.top_k = 2, c.moe.d_ff_expert = 24;
  return c;
}

// Qwen3-MoE: q/k norms, an MoE in every other layer (dense between), top-k not renormalised.
model::ModelConfig qwen3_moe_cfg() {
  model::ModelConfig c = mixtral_cfg();
  c.qk_norm = true, c.moe_every = 2, c.moe.normalize_topk = false;
  return c;
}

// Qwen2-MoE: q/k/v biases, a dense first layer, top-k not renormalised, a
// gated shared expert of 2 x d_ff_expert.
model::ModelConfig qwen2_moe_cfg() {
  model::ModelConfig c = mixtral_cfg();
  c.qkv_bias = true, c.moe_first_dense = 1, c.moe.normalize_topk = false;
  c.moe.n_shared_experts = 2, c.moe.shared_gate = true;
  return c;
}

// DeepSeek-V3: MLA (a q latent), a dense first layer, then DeepSeek's MoE
// (sigmoid router with its expert bias, 4 groups of 2, top-2 groups,
// renormalised x 2.5, one shared expert). mla_dense_cfg: MLA with dense
// MLPs and no q latent (q_proj).
model::ModelConfig deepseek_cfg() {
  model::ModelConfig c = llama_cfg();
  c.n_kv_head = c.n_head, c.rope_theta = 10000.0f;
  c.mla = {.enabled = true, .q_lora_rank = 24, .kv_lora_rank = 16, .qk_nope = 8, .qk_rope = 4, .v_dim = 6};
  c.head_size = 12;
  c.moe_enabled = true, c.moe_first_dense = 1;
  c.moe.n_experts = 8, c.moe.top_k = 2, c.moe.d_ff_expert = 12, c.moe.n_shared_experts = 1;
  c.moe.sigmoid = true, c.moe.topk_scaling = 2.5f, c.moe.n_groups = 4, c.moe.top_groups = 2;
  c.moe.balance = model::MoeBalance::aux_free;
  return c;
}
// DeepSeek-V3 under YaRN with DeepSeek's mscale pair (x4 over 16 positions).
model::ModelConfig deepseek_yarn_cfg() {
  model::ModelConfig c = deepseek_cfg();
  c.rope_scaling = yarn_scaling(4.0, 16.0, 32.0, 1.0, 0.0, c.mla.qk_rope, c.rope_theta, 1.0, 0.6);
  return c;
}
model::ModelConfig mla_dense_cfg() {
  model::ModelConfig c = deepseek_cfg();
  c.moe_enabled = false, c.mla.q_lora_rank = 0;
  return c;
}

// Llama with YaRN (factor 4 over 256 positions) or linear scaling.
model::ModelConfig yarn_cfg() {
  model::ModelConfig c = llama_cfg();
  c.rope_scaling = yarn_scaling(4.0, 256.0, 32.0, 1.0, 0.0, c.head_dim(), c.rope_theta);
  return c;
}
model::ModelConfig linear_cfg() {
  model::ModelConfig c = llama_cfg();
  c.rope_scaling = {.factor = 2.0, .kind = RopeKind::linear};
  return c;
}

// cfg with a sliding window of `w` keys in every layer; the plain llama's is Mistral's model.
model::ModelConfig windowed(model::ModelConfig c, int64_t w = 4) {
  c.sliding_window = w;
  return c;
}
model::ModelConfig mistral_cfg() { return windowed(llama_cfg()); }

model::ModelConfig gpt2_cfg() {
  model::ModelConfig c;
  c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.n_kv_head = 4, c.d_ff = 64;
  c.vocab_size = 200, c.max_seq_len = 16;
  return c;
}

fs::path scratch_dir() {
  return fs::temp_directory_path() / ("trainer_test_hf_config_" + std::to_string(::getpid()));
}

// cfg's own config.json with `key` set to `value` (null: removed), written to a file.
std::string config_with(const model::ModelConfig& cfg, const std::string& key, const Json* value) {
  Json j = parse_json(hf_config_json(cfg), "config.json");
  Json out = Json::object();
  for (const auto& [k, v] : j.members())
    if (k != key) out.set(k, v);
  if (value) out.set(key, *value);
  static int n = 0;
  fs::path dir = scratch_dir();
  fs::create_directories(dir);
  std::string path = (dir / ("config_" + std::to_string(n++) + ".json")).string();
  write_file_durably(path, out.dump(2));
  return path;
}

}  // namespace

TEST_CASE("hf config: each family's own config.json passes its check", "[cpu][checkpoint]") {
  for (const model::ModelConfig& cfg :
       {gpt2_cfg(), llama_cfg(), qwen2_cfg(), qwen3_cfg(), mixtral_cfg(), qwen3_moe_cfg(), qwen2_moe_cfg(),
        yarn_cfg(), linear_cfg(), mistral_cfg(), windowed(qwen2_cfg()), windowed(qwen3_cfg()),
        windowed(mixtral_cfg()), windowed(qwen3_moe_cfg()), windowed(qwen2_moe_cfg()), windowed(yarn_cfg()),
        deepseek_cfg(), mla_dense_cfg(), deepseek_yarn_cfg()}) {
    std::string path = config_with(cfg, "", nullptr);
    CHECK_NOTHROW(check_hf_config(path, cfg));
  }
  CHECK(hf_architecture(gpt2_cfg()) == "GPT2LMHeadModel");
  CHECK(hf_architecture(llama_cfg()) == "LlamaForCausalLM");
  CHECK(hf_architecture(mixtral_cfg()) == "MixtralForCausalLM");
  CHECK(hf_architecture(qwen2_cfg()) == "Qwen2ForCausalLM");
  Json qwen2 = parse_json(hf_config_json(qwen2_cfg()), "config.json");
  CHECK(qwen2.at("model_type").as_string() == "qwen2");
  CHECK(!qwen2.at("use_sliding_window").as_bool());
  CHECK(qwen2.at("sliding_window").kind() == Json::Kind::null);
  CHECK(qwen2.find("attention_bias") == nullptr);  // LlamaConfig's, which would bias o_proj too
  CHECK(qwen2.at("tie_word_embeddings").as_bool());
  CHECK(hf_architecture(qwen3_cfg()) == "Qwen3ForCausalLM");
  Json qwen3 = parse_json(hf_config_json(qwen3_cfg()), "config.json");
  CHECK(qwen3.at("model_type").as_string() == "qwen3");
  CHECK(qwen3.at("head_dim").as_int() == 8);  // Qwen3Config's default would be 128
  CHECK(!qwen3.at("attention_bias").as_bool());
  Json mixtral = parse_json(hf_config_json(mixtral_cfg()), "config.json");
  CHECK(mixtral.at("model_type").as_string() == "mixtral");
  CHECK(mixtral.at("intermediate_size").as_int() == 24);  // the experts' width
  CHECK(mixtral.at("num_local_experts").as_int() == 4);
  CHECK(mixtral.at("num_experts_per_tok").as_int() == 2);
  CHECK(mixtral.at("sliding_window").kind() == Json::Kind::null);
  CHECK(hf_architecture(qwen2_moe_cfg()) == "Qwen2MoeForCausalLM");
  Json qwen2_moe = parse_json(hf_config_json(qwen2_moe_cfg()), "config.json");
  CHECK(qwen2_moe.at("model_type").as_string() == "qwen2_moe");
  CHECK(qwen2_moe.at("shared_expert_intermediate_size").as_int() == 48);
  CHECK(qwen2_moe.at("moe_intermediate_size").as_int() == 24);
  CHECK(qwen2_moe.at("mlp_only_layers").items().size() == 1);
  CHECK(qwen2_moe.at("qkv_bias").as_bool());
  CHECK(qwen2_moe.find("attention_bias") == nullptr);
  CHECK(hf_architecture(qwen3_moe_cfg()) == "Qwen3MoeForCausalLM");
  Json qwen3_moe = parse_json(hf_config_json(qwen3_moe_cfg()), "config.json");
  CHECK(qwen3_moe.at("model_type").as_string() == "qwen3_moe");
  CHECK(qwen3_moe.at("intermediate_size").as_int() == 48);  // the dense layers' width
  CHECK(qwen3_moe.at("moe_intermediate_size").as_int() == 24);
  CHECK(qwen3_moe.at("num_experts").as_int() == 4);
  CHECK(qwen3_moe.at("num_experts_per_tok").as_int() == 2);
  CHECK(qwen3_moe.at("decoder_sparse_step").as_int() == 2);
  CHECK(qwen3_moe.at("mlp_only_layers").items().empty());
  CHECK(!qwen3_moe.at("norm_topk_prob").as_bool());
  CHECK(!qwen3_moe.at("use_sliding_window").as_bool());
  CHECK(qwen3_moe.find("num_local_experts") == nullptr);
  // DeepSeek's first dense layers are Qwen3-MoE's mlp_only_layers.
  model::ModelConfig dense_first = qwen3_moe_cfg();
  dense_first.n_layer = 4, dense_first.moe_first_dense = 2;
  Json df = parse_json(hf_config_json(dense_first), "config.json");
  REQUIRE(df.at("mlp_only_layers").items().size() == 2);
  CHECK(df.at("mlp_only_layers").items()[1].as_int() == 1);
  CHECK_NOTHROW(check_hf_config(config_with(dense_first, "", nullptr), dense_first));
  CHECK_THROWS_WITH(check_hf_config(config_with(dense_first, "", nullptr), qwen3_moe_cfg()),
                    Contains("num_hidden_layers is 4, but model.n_layer is 2") &&
                        Contains("mlp_only_layers holds the first 2 layers, but model.moe.first_dense is 0"));
  model::ModelConfig scaled = llama_cfg();
  scaled.rope_scaling = {.factor = 32, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192};
  Json j = parse_json(hf_config_json(scaled), "config.json");
  CHECK(j.at("rope_scaling").at("rope_type").as_string() == "llama3");
  CHECK(j.at("rope_scaling").at("factor").as_number() == 32.0);
  CHECK(j.at("rope_scaling").at("original_max_position_embeddings").as_int() == 8192);
  CHECK(parse_json(hf_config_json(llama_cfg()), "c").find("rope_scaling") == nullptr);
  // Float-typed keys are written as floats even when whole: transformers 5's
  // strict configs refuse an int there (router_jitter_noise 0, rope_theta 500000).
  const std::string llama_text = hf_config_json(llama_cfg()), gpt2_text = hf_config_json(gpt2_cfg());
  CHECK_THAT(llama_text, Contains("\"rope_theta\": 500000.0") && Contains("\"initializer_range\": 0.02"));
  CHECK_THAT(gpt2_text, Contains("\"resid_pdrop\": 0.0") && Contains("\"attn_pdrop\": 0.0"));
  CHECK_THAT(hf_config_json(mixtral_cfg()), Contains("\"router_jitter_noise\": 0.0"));
  CHECK_THAT(hf_config_json(yarn_cfg()), Contains("\"factor\": 4.0") && Contains("\"beta_slow\": 1.0") &&
                                             Contains("\"max_position_embeddings\": 1024,"));
  model::ModelConfig odd = yarn_cfg();
  odd.rope_scaling = yarn_scaling(2.5, 333.0, 32.0, 1.0, 0.0, odd.head_dim(), odd.rope_theta);
  CHECK_THROWS_WITH(hf_architecture(odd), Contains("model.rope_scaling: factor 2.5 x "
                                                   "original_max_position_embeddings 333 = 832.5 is not a whole number"));
  // YaRN: max_position_embeddings = factor x original, which transformers 4 reads as the factor.
  Json yarn = parse_json(hf_config_json(yarn_cfg()), "config.json");
  CHECK(yarn.at("rope_scaling").at("rope_type").as_string() == "yarn");
  CHECK(yarn.at("rope_scaling").at("factor").as_number() == 4.0);
  CHECK(yarn.at("rope_scaling").at("original_max_position_embeddings").as_int() == 256);
  CHECK(yarn.at("rope_scaling").at("beta_fast").as_number() == 32.0);
  CHECK(yarn.at("rope_scaling").at("beta_slow").as_number() == 1.0);
  CHECK(yarn.at("rope_scaling").at("attention_factor").as_number() == Approx(0.1 * std::log(4.0) + 1));
  CHECK(yarn.at("max_position_embeddings").as_int() == 1024);
  Json linear = parse_json(hf_config_json(linear_cfg()), "config.json");
  CHECK(linear.at("rope_scaling").at("rope_type").as_string() == "linear");
  CHECK(linear.at("rope_scaling").at("factor").as_number() == 2.0);
  CHECK(linear.at("rope_scaling").find("original_max_position_embeddings") == nullptr);
  fs::remove_all(scratch_dir());
}

TEST_CASE("hf config: a sliding window exports as Mistral's, Mixtral's or the Qwen classes' keys",
          "[cpu][checkpoint]") {
  // A plain llama with a window is MistralForCausalLM: Llama's keys (less
  // LlamaConfig's attention_bias and mlp_bias) and the window.
  CHECK(hf_architecture(mistral_cfg()) == "MistralForCausalLM");
  CHECK(hf_class(mistral_cfg()) == "MistralForCausalLM");
  Json mistral = parse_json(hf_config_json(mistral_cfg()), "config.json");
  CHECK(mistral.at("model_type").as_string() == "mistral");
  CHECK(mistral.at("sliding_window").as_int() == 4);
  CHECK(mistral.at("head_dim").as_int() == 8);
  CHECK(mistral.at("num_key_value_heads").as_int() == 2);
  CHECK(mistral.find("attention_bias") == nullptr);
  CHECK(mistral.find("use_sliding_window") == nullptr);
  // A window with biases or norms stays Qwen2 or Qwen3, with an MoE Mixtral or Qwen-MoE.
  CHECK(hf_architecture(windowed(qwen2_cfg())) == "Qwen2ForCausalLM");
  CHECK(hf_architecture(windowed(qwen3_cfg())) == "Qwen3ForCausalLM");
  CHECK(hf_architecture(windowed(mixtral_cfg())) == "MixtralForCausalLM");
  CHECK(hf_architecture(windowed(qwen3_moe_cfg())) == "Qwen3MoeForCausalLM");
  CHECK(hf_architecture(windowed(qwen2_moe_cfg())) == "Qwen2MoeForCausalLM");
  CHECK(parse_json(hf_config_json(windowed(mixtral_cfg())), "c").at("sliding_window").as_int() == 4);
  // Qwen: use_sliding_window with max_window_layers 0 (4.x windows the layers
  // from it on) and layer_types (5's Qwen2-MoE would window only even layers).
  for (const model::ModelConfig& cfg : {windowed(qwen2_cfg()), windowed(qwen3_cfg()), windowed(qwen3_moe_cfg()),
                                        windowed(qwen2_moe_cfg())}) {
    Json j = parse_json(hf_config_json(cfg), "config.json");
    INFO(j.at("model_type").as_string());
    CHECK(j.at("use_sliding_window").as_bool());
    CHECK(j.at("sliding_window").as_int() == 4);
    CHECK(j.at("max_window_layers").as_int() == 0);
    REQUIRE(j.at("layer_types").items().size() == 2);
    for (const Json& t : j.at("layer_types").items()) CHECK(t.as_string() == "sliding_attention");
  }
  // Full-attention layers among windowed ones (model.full_attention_every):
  // only Qwen2's and Qwen3's layer_types say which; Mistral, Mixtral and
  // Qwen3-MoE window every layer, so those jobs are refused by the key.
  for (model::ModelConfig cfg : {windowed(qwen2_cfg()), windowed(qwen3_cfg()), windowed(qwen2_moe_cfg())}) {
    cfg.full_attention_every = 2;
    Json j = parse_json(hf_config_json(cfg), "config.json");
    INFO(j.at("model_type").as_string());
    REQUIRE(j.at("layer_types").items().size() == 2);
    CHECK(j.at("layer_types").items()[0].as_string() == "sliding_attention");
    CHECK(j.at("layer_types").items()[1].as_string() == "full_attention");
    const std::string own = config_with(cfg, "", nullptr);
    CHECK_NOTHROW(check_hf_config(own, cfg));
    // The same config.json against a job windowing both layers, and the reverse.
    model::ModelConfig every = cfg;
    every.full_attention_every = 0;
    CHECK_THROWS_WITH(check_hf_config(own, every),
                      Contains("layer_types: layer 1 attends in full, but model.sliding_window is 4 in "
                               "every layer"));
    CHECK_THROWS_WITH(check_hf_config(config_with(every, "", nullptr), cfg),
                      Contains("layer 1 is windowed, but model.sliding_window is 4 in every layer but "
                               "layers 2, 4, ... (model.full_attention_every 2)"));
  }
  for (model::ModelConfig cfg : {mistral_cfg(), windowed(mixtral_cfg()), windowed(qwen3_moe_cfg())}) {
    cfg.full_attention_every = 2;
    CHECK_THROWS_WITH(hf_architecture(cfg), Contains("model.full_attention_every is 2"));
  }
  // Without a window: as before (no layer_types; Qwen's window off).
  CHECK(parse_json(hf_config_json(qwen2_cfg()), "c").find("layer_types") == nullptr);
  CHECK(parse_json(hf_config_json(llama_cfg()), "c").find("sliding_window") == nullptr);
  fs::remove_all(scratch_dir());
}

TEST_CASE("hf config: a differing hyper-parameter is named with the job key", "[cpu][checkpoint]") {
  struct Case {
    model::ModelConfig cfg;
    std::string key;
    Json value;
    std::string message;
  };
  const Case cases[] = {
      {gpt2_cfg(), "n_layer", Json(12), "n_layer is 12, but model.n_layer is 2"},
      {gpt2_cfg(), "n_inner", Json(), "n_inner is 128, but model.d_ff is 64"},  // null: 4 * n_embd
      {gpt2_cfg(), "layer_norm_epsilon", Json(1e-6), "layer_norm_epsilon is 1e-06, but model.norm_eps is 1e-05"},
      {gpt2_cfg(), "n_positions", Json(8), "n_positions is 8, below model.max_seq_len 16"},
      {gpt2_cfg(), "activation_function", Json("gelu"), "activation_function is \"gelu\""},
      {gpt2_cfg(), "tie_word_embeddings", Json(false), "tie_word_embeddings is false, but model.tie_embeddings is true"},
      {gpt2_cfg(), "model_type", Json("llama"), "model_type is \"llama\", but the job's model is gpt2"},
      {llama_cfg(), "rope_theta", Json(10000.0), "rope_theta is 10000, but model.rope_theta is 500000"},
      {llama_cfg(), "num_key_value_heads", Json(), "num_key_value_heads is 4, but model.n_kv_head is 2"},
      {llama_cfg(), "rms_norm_eps", Json(), "rms_norm_eps is 1e-06"},  // default 1e-6 = ours: no error
      {llama_cfg(), "tie_word_embeddings", Json(true), "tie_word_embeddings is true, but model.tie_embeddings is false"},
      {llama_cfg(), "attention_bias", Json(true), "attention_bias is true"},
      {llama_cfg(), "hidden_act", Json("gelu"), "hidden_act is \"gelu\""},
      {llama_cfg(), "intermediate_size", Json(64), "intermediate_size is 64, but model.d_ff is 48"},
      {mixtral_cfg(), "num_local_experts", Json(8), "num_local_experts is 8, but model.moe.n_experts is 4"},
      {mixtral_cfg(), "num_experts_per_tok", Json(1), "num_experts_per_tok is 1, but model.moe.top_k is 2"},
      {mixtral_cfg(), "intermediate_size", Json(48), "intermediate_size is 48, but model.moe.d_ff_expert is 24"},
      {mixtral_cfg(), "sliding_window", Json(8),
       "sliding_window is 8, below model.max_seq_len 16, but model.sliding_window is null (full causal attention)"},
      // Left out: MixtralConfig's none.
      {windowed(mixtral_cfg()), "sliding_window", Json(),
       "sliding_window is null (full causal attention), but model.sliding_window is 4"},
      {windowed(mixtral_cfg()), "sliding_window", Json(8), "sliding_window is 8, but model.sliding_window is 4"},
      // Mistral: its window, and MistralConfig's defaults (4096 keys, 8 kv heads) for keys left out.
      {mistral_cfg(), "sliding_window", Json(8), "sliding_window is 8, but model.sliding_window is 4"},
      {mistral_cfg(), "sliding_window", Json(), "sliding_window is 4096, but model.sliding_window is 4"},
      {mistral_cfg(), "num_key_value_heads", Json(), "num_key_value_heads is 8, but model.n_kv_head is 2"},
      {mistral_cfg(), "intermediate_size", Json(), "intermediate_size is 14336, but model.d_ff is 48"},
      {mistral_cfg(), "model_type", Json("llama"),
       "model_type is \"llama\", but the job's model is mistral (model.family llama with model.sliding_window): "
       "LlamaForCausalLM has no sliding window, but model.sliding_window is 4"},
      {llama_cfg(), "sliding_window", Json(8), ""},  // a llama config.json's: LlamaConfig has no window
      // DeepSeek-V3: MLA's and the MoE's keys, DeepseekV3Config's defaults when left out.
      {deepseek_cfg(), "q_lora_rank", Json(), "q_lora_rank is 1536, but model.mla.q_lora_rank is 24"},
      {mla_dense_cfg(), "q_lora_rank", Json(24), "q_lora_rank is 24, but model.mla.q_lora_rank is null"},
      {deepseek_cfg(), "kv_lora_rank", Json(32), "kv_lora_rank is 32, but model.mla.kv_lora_rank is 16"},
      {deepseek_cfg(), "qk_nope_head_dim", Json(), "qk_nope_head_dim is 128, but model.mla.qk_nope_head_dim is 8"},
      {deepseek_cfg(), "qk_rope_head_dim", Json(8), "qk_rope_head_dim is 8, but model.mla.qk_rope_head_dim is 4"},
      {deepseek_cfg(), "v_head_dim", Json(8), "v_head_dim is 8, but model.mla.v_head_dim is 6"},
      {deepseek_cfg(), "head_dim", Json(12), "head_dim is 12, but qk_rope_head_dim is 4: transformers would rotate"},
      {deepseek_cfg(), "rms_norm_eps", Json(1e-5), "rms_norm_eps is 1e-05, but model.norm_eps is 1e-06"},
      {deepseek_cfg(), "rope_theta", Json(), "rope_theta is 10000"},  // DeepseekV3Config's default = ours
      {deepseek_cfg(), "num_key_value_heads", Json(1), "num_key_value_heads is 1, but model.n_kv_head is 4"},
      {deepseek_cfg(), "first_k_dense_replace", Json(), "first_k_dense_replace is 3, but model.moe.first_dense is 1"},
      {mla_dense_cfg(), "first_k_dense_replace", Json(1),
       "first_k_dense_replace is 1: the layers from it on are MoE, but the job has no model.moe"},
      {deepseek_cfg(), "moe_layer_freq", Json(2), "moe_layer_freq is 2, but model.moe.every is 1"},
      {deepseek_cfg(), "n_routed_experts", Json(), "n_routed_experts is 256, but model.moe.n_experts is 8"},
      {deepseek_cfg(), "num_experts_per_tok", Json(4), "num_experts_per_tok is 4, but model.moe.top_k is 2"},
      {deepseek_cfg(), "moe_intermediate_size", Json(24), "moe_intermediate_size is 24, but model.moe.d_ff_expert is 12"},
      {deepseek_cfg(), "intermediate_size", Json(64), "intermediate_size is 64, but model.d_ff is 48"},
      {deepseek_cfg(), "n_shared_experts", Json(2), "n_shared_experts is 2, but model.moe.n_shared_experts is 1"},
      {deepseek_cfg(), "routed_scaling_factor", Json(1.0),
       "routed_scaling_factor is 1, but model.moe.topk_scaling_factor is 2.5"},
      {deepseek_cfg(), "n_group", Json(), "n_group is 8, but model.moe.n_groups is 4"},
      {deepseek_cfg(), "topk_group", Json(1), "topk_group is 1, but model.moe.top_groups is 2"},
      {deepseek_cfg(), "norm_topk_prob", Json(false), "norm_topk_prob is false, but model.moe.normalize_topk is true"},
      {deepseek_cfg(), "scoring_func", Json("softmax"), "scoring_func is \"softmax\": DeepSeek-V3 routes by sigmoid"},
      {deepseek_cfg(), "topk_method", Json("greedy"), "topk_method is \"greedy\": DeepSeek-V3 chooses"},
      {deepseek_cfg(), "attention_bias", Json(true), "attention_bias is true: this trainer's multi-head latent"},
      // Fine-grained fp8 is read (hf_fp8.h); other quantizations and fp8 variants are not.
      {deepseek_cfg(), "quantization_config", parse_json(R"({"quant_method": "bitsandbytes"})", "q"),
       "quantization_config.quant_method is \"bitsandbytes\": this trainer reads fine-grained fp8 checkpoints"},
      {llama_cfg(), "quantization_config", parse_json(R"({"quant_method": "gptq", "bits": 4})", "q"),
       "quantization_config.quant_method is \"gptq\": this trainer reads fine-grained fp8 checkpoints"},
      {deepseek_cfg(), "quantization_config", parse_json(R"({"quant_method": "fp8", "fmt": "e5m2"})", "q"),
       "quantization_config.fmt is \"e5m2\": this trainer reads E4M3 fp8 weights"},
      {qwen3_cfg(), "quantization_config", parse_json(R"({"quant_method": "fp8", "activation_scheme": "static"})", "q"),
       "quantization_config.activation_scheme is \"static\": this trainer reads checkpoints without static "
       "activation scales"},
      {deepseek_cfg(), "quantization_config", parse_json(R"({"quant_method": "fp8", "weight_block_size": [128]})", "q"),
       "quantization_config.weight_block_size is [128]: expected [rows, columns] of whole numbers >= 1"},
      {deepseek_cfg(), "quantization_config", parse_json(R"({"quant_method": "fp8", "weight_block_size": [0, 128]})", "q"),
       "quantization_config.weight_block_size is [0,128]: expected [rows, columns]"},
      {deepseek_cfg(), "quantization_config", parse_json(R"({"quant_method": "fp8", "weight_block_size": [1e40, 128.5]})", "q"),
       "quantization_config.weight_block_size is [1e+40,128.5]: expected [rows, columns]"},
      {deepseek_cfg(), "model_type", Json("llama"),
       "model_type is \"llama\", but the job's model is deepseek_v3 (model.family llama with model.mla): "
       "Llama is model.family llama without"},
      {llama_cfg(), "model_type", Json("deepseek_v3"),
       "model_type is \"deepseek_v3\", but the job's model is llama (model.family llama): DeepSeek-V3 is "
       "model.family llama with model.mla"},
      {qwen2_cfg(), "model_type", Json("mistral"),
       "model_type is \"mistral\", but the job's model is qwen2 (model.family llama with model.qkv_bias): "
       "Mistral is model.family llama without model.qkv_bias or model.qk_norm"},
      // The Qwen classes' window: use_sliding_window, sliding_window and which layers.
      {windowed(qwen2_cfg()), "use_sliding_window", Json(false),
       "use_sliding_window is false (full causal attention), but model.sliding_window is 4 in every layer"},
      {windowed(qwen2_cfg()), "sliding_window", Json(8), "sliding_window is 8, but model.sliding_window is 4"},
      {windowed(qwen2_cfg()), "sliding_window", Json(), "sliding_window is 4096, but model.sliding_window is 4"},
      {windowed(qwen3_cfg()), "layer_types", parse_json(R"(["sliding_attention", "full_attention"])", "t"),
       "layer_types: layer 1 attends in full, but model.sliding_window is 4 in every layer"},
      {windowed(qwen3_cfg()), "layer_types", parse_json(R"(["chunked_attention", "sliding_attention"])", "t"),
       "layer_types[0] is \"chunked_attention\": this trainer computes full_attention and sliding_attention"},
      {windowed(qwen3_cfg()), "layer_types", parse_json(R"(["sliding_attention"])", "t"),
       "layer_types is [\"sliding_attention\"]: expected a list of num_hidden_layers 2 layer types"},
      // transformers 5's Qwen2-MoE without layer_types windows the even layers below max_window_layers.
      {windowed(qwen2_moe_cfg()), "layer_types", Json(),
       "no layer_types, and max_window_layers is 0: Qwen2-MoE windows the even layers below it: layers 0, 1 "
       "attend in full, but model.sliding_window is 4 in every layer (layer_types: all \"sliding_attention\")"},
      {windowed(qwen3_moe_cfg()), "sliding_window", Json(), "sliding_window is 4096, but model.sliding_window is 4"},
      {mixtral_cfg(), "model_type", Json("llama"), "model_type is \"llama\", but the job's model is mixtral"},
      // Left out: MixtralConfig's 8 key-value heads, not the query heads' count.
      {mixtral_cfg(), "num_key_value_heads", Json(), "num_key_value_heads is 8, but model.n_kv_head is 2"},
      {mixtral_cfg(), "model_type", Json("qwen3_moe"),
       "model_type is \"qwen3_moe\", but the job's model is mixtral (model.family llama with model.moe): "
       "Qwen3-MoE is model.family llama with model.moe and model.qk_norm: true"},
      {qwen3_moe_cfg(), "num_experts", Json(8), "num_experts is 8, but model.moe.n_experts is 4"},
      {qwen3_moe_cfg(), "num_experts", Json(), "num_experts is 128, but model.moe.n_experts is 4"},
      {qwen3_moe_cfg(), "moe_intermediate_size", Json(48), "moe_intermediate_size is 48, but model.moe.d_ff_expert is 24"},
      {qwen3_moe_cfg(), "num_experts_per_tok", Json(), "num_experts_per_tok is 8, but model.moe.top_k is 2"},
      {qwen3_moe_cfg(), "norm_topk_prob", Json(true), "norm_topk_prob is true, but model.moe.normalize_topk is false"},
      {qwen3_moe_cfg(), "decoder_sparse_step", Json(1), "decoder_sparse_step is 1, but model.moe.every is 2"},
      {qwen3_moe_cfg(), "intermediate_size", Json(), "intermediate_size is 6144, but model.d_ff is 48"},
      {qwen3_moe_cfg(), "num_key_value_heads", Json(), "num_key_value_heads is 4, but model.n_kv_head is 2"},
      {qwen3_moe_cfg(), "hidden_size", Json(), "hidden_size is 2048, but model.d_model is 32"},
      {qwen3_moe_cfg(), "mlp_only_layers", parse_json("[1]", "mlp_only_layers"),
       "mlp_only_layers is [1]: this trainer's dense layers are the first model.moe.first_dense ones "
       "and those model.moe.every skips"},
      {qwen3_moe_cfg(), "model_type", Json("qwen2_moe"),
       "model_type is \"qwen2_moe\", but the job's model is qwen3_moe (model.family llama with model.moe and "
       "model.qk_norm): Qwen2-MoE is model.family llama with model.qkv_bias: true and model.moe with "
       "shared experts and shared_expert_gate: true"},
      {qwen2_moe_cfg(), "shared_expert_intermediate_size", Json(), "shared_expert_intermediate_size is "
       "5632, but model.moe.n_shared_experts x model.moe.d_ff_expert is 48"},
      {qwen2_moe_cfg(), "num_experts", Json(), "num_experts is 60, but model.moe.n_experts is 4"},
      {qwen2_moe_cfg(), "qkv_bias", Json(false), "qkv_bias is false: this trainer's Qwen2-MoE has q/k/v biases"},
      {llama_cfg(), "model_type", Json("qwen2"),
       "model_type is \"qwen2\", but the job's model is llama (model.family llama): Qwen2 is model.family "
       "llama with model.qkv_bias: true"},
      {qwen2_cfg(), "model_type", Json("llama"),
       "model_type is \"llama\", but the job's model is qwen2 (model.family llama with model.qkv_bias)"},
      // Left out: Qwen2Config's defaults, not LlamaConfig's.
      {qwen2_cfg(), "vocab_size", Json(), "vocab_size is 151936, but model.vocab_size is 200"},
      {qwen2_cfg(), "intermediate_size", Json(), "intermediate_size is 22016, but model.d_ff is 48"},
      {qwen2_cfg(), "tie_word_embeddings", Json(false), "tie_word_embeddings is false, but model.tie_embeddings is true"},
      {qwen2_cfg(), "attention_bias", Json(true), "attention_bias is true: this trainer's llama attention has no o_proj bias"},
      {llama_cfg(), "model_type", Json("qwen3"),
       "model_type is \"qwen3\", but the job's model is llama (model.family llama): Qwen3 is model.family "
       "llama with model.qk_norm: true"},
      {qwen3_cfg(), "head_dim", Json(), "head_dim is 128, but model.head_dim is 8"},  // Qwen3Config's default
      {llama_cfg(), "head_dim", Json(16), "head_dim is 16, but model.head_dim is 8"},
      {qwen3_cfg(), "attention_bias", Json(true), "attention_bias is true"},
  };
  for (const Case& c : cases) {
    INFO(c.key << " = " << c.value.dump());
    std::string path = config_with(c.cfg, c.key, c.value.kind() == Json::Kind::null ? nullptr : &c.value);
    if (c.message.empty() || (c.key == "rms_norm_eps" && c.value.kind() == Json::Kind::null) ||
        (c.key == "rope_theta" && c.cfg.mla.enabled)) {  // left out: the class's default, which is the job's
      CHECK_NOTHROW(check_hf_config(path, c.cfg));
      continue;
    }
    CHECK_THROWS_WITH(check_hf_config(path, c.cfg), Contains(path + ": " + c.message));
  }
  // RoPE scaling: Llama 3.1's llama3 when the job has it too, with the same numbers.
  Json scaling = Json::object();
  scaling.set("rope_type", Json("llama3"));
  scaling.set("factor", Json(32.0));
  std::string path = config_with(llama_cfg(), "rope_scaling", &scaling);
  CHECK_THROWS_WITH(check_hf_config(path, llama_cfg()),
                    Contains("rope_scaling is Llama 3.1's llama3 scaling, but the job has no model.rope_scaling"));
  model::ModelConfig scaled = llama_cfg();
  scaled.rope_scaling = {.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192};
  CHECK_THROWS_WITH(check_hf_config(path, scaled),
                    Contains("rope_scaling.factor is 32, but model.rope_scaling.factor is 8"));
  CHECK_NOTHROW(check_hf_config(config_with(scaled, "", nullptr), scaled));  // its own export's
  CHECK_THROWS_WITH(check_hf_config(config_with(llama_cfg(), "", nullptr), scaled),
                    Contains("plain RoPE, but model.rope_scaling is set"));
  scaling.set("rope_type", Json("dynamic"));
  CHECK_THROWS_WITH(check_hf_config(config_with(llama_cfg(), "rope_scaling", &scaling), llama_cfg()),
                    Contains("RoPE scaling \"dynamic\": this trainer computes plain RoPE or the llama3, "
                             "linear and yarn scalings"));
  // YaRN and linear: each key against the job's, and what this trainer does not compute.
  auto yarn_with = [&](const std::string& key, const Json* value) {
    Json j = parse_json(hf_config_json(yarn_cfg()), "c");
    Json rs = Json::object();
    for (const auto& [k, v] : j.at("rope_scaling").members())
      if (k != key) rs.set(k, v);
    if (value) rs.set(key, *value);
    return config_with(yarn_cfg(), "rope_scaling", &rs);
  };
  const Json eight(8.0), two(2.0), one(1.0), no(false), sixteen(16.0);
  CHECK_THROWS_WITH(check_hf_config(yarn_with("factor", &eight), yarn_cfg()),
                    Contains("max_position_embeddings 1024 / rope_scaling.original_max_position_embeddings "
                             "256 is not rope_scaling.factor 8"));
  CHECK_THROWS_WITH(check_hf_config(yarn_with("factor", &eight), yarn_cfg()),
                    Contains("rope_scaling.factor is 8, but model.rope_scaling.factor is 4"));
  CHECK_THROWS_WITH(check_hf_config(yarn_with("beta_fast", &sixteen), yarn_cfg()),
                    Contains("rope_scaling.beta_fast is 16, but model.rope_scaling.beta_fast is 32"));
  CHECK_NOTHROW(check_hf_config(yarn_with("beta_slow", nullptr), yarn_cfg()));  // default 1
  CHECK_NOTHROW(check_hf_config(yarn_with("attention_factor", nullptr), yarn_cfg()));  // default 0.1 ln 4 + 1
  CHECK_THROWS_WITH(check_hf_config(yarn_with("attention_factor", &one), yarn_cfg()),
                    Contains("rope_scaling.attention_factor is 1, but model.rope_scaling.attention_factor is 1.1386"));
  CHECK_THROWS_WITH(check_hf_config(yarn_with("mscale", &one), yarn_cfg()),
                    Contains("rope_scaling.mscale is 1, but model.rope_scaling.mscale is 0"));
  CHECK_THROWS_WITH(check_hf_config(yarn_with("truncate", &no), yarn_cfg()),
                    Contains("rope_scaling.truncate is false: this trainer rounds YaRN's ramp ends"));
  CHECK_THROWS_WITH(check_hf_config(config_with(yarn_cfg(), "", nullptr), scaled),
                    Contains("rope_scaling.rope_type is yarn, but model.rope_scaling.type is llama3"));
  CHECK_THROWS_WITH(check_hf_config(config_with(yarn_cfg(), "", nullptr), llama_cfg()),
                    Contains("rope_scaling is yarn scaling, but the job has no model.rope_scaling"));
  Json linear2 = Json::object();
  linear2.set("rope_type", Json("linear"));
  linear2.set("factor", two);
  CHECK_NOTHROW(check_hf_config(config_with(linear_cfg(), "rope_scaling", &linear2), linear_cfg()));
  linear2.set("factor", eight);
  CHECK_THROWS_WITH(check_hf_config(config_with(linear_cfg(), "rope_scaling", &linear2), linear_cfg()),
                    Contains("rope_scaling.factor is 8, but model.rope_scaling.factor is 2"));
  // transformers 5 writes the base into rope_parameters.
  Json params = Json::object();
  params.set("rope_type", Json("default"));
  params.set("rope_theta", Json(500000.0));
  Json j = parse_json(read_text_file(config_with(llama_cfg(), "rope_theta", nullptr)), "c");
  j.set("rope_parameters", params);
  replace_file_atomically(path, j.dump());
  CHECK_NOTHROW(check_hf_config(path, llama_cfg()));
  // Every difference is named in the one line, not only the first.
  model::ModelConfig other = llama_cfg();
  other.n_layer = 3, other.rope_theta = 10000.0f, other.tie_embeddings = true;
  CHECK_THROWS_WITH(
      check_hf_config(config_with(llama_cfg(), "", nullptr), other),
      Contains(": num_hidden_layers is 2, but model.n_layer is 3; rope_theta is 500000, but "
               "model.rope_theta is 10000; tie_word_embeddings is false, but model.tie_embeddings "
               "is true (model.init_from)"));
  // A Qwen2 job without a window: a config.json's is off, windows no layer
  // (transformers 5: the layers from max_window_layers on), or is no narrower
  // than any sequence.
  Json on(true);
  Json qj = parse_json(read_text_file(config_with(qwen2_cfg(), "use_sliding_window", &on)), "c");
  qj.set("sliding_window", Json(8));
  qj.set("max_window_layers", Json(0));
  replace_file_atomically(path, qj.dump());
  CHECK_THROWS_WITH(check_hf_config(path, qwen2_cfg()),
                    Contains("use_sliding_window is true with sliding_window 8, below model.max_seq_len 16, in "
                             "layers 0, 1 (max_window_layers is 0: the layers from it on are windowed), but "
                             "model.sliding_window is null (full causal attention)"));
  qj.set("max_window_layers", Json(1));
  replace_file_atomically(path, qj.dump());
  CHECK_THROWS_WITH(check_hf_config(path, qwen2_cfg()), Contains("16, in layer 1 (max_window_layers is 1"));
  qj.set("max_window_layers", Json(2));  // no layer windowed
  replace_file_atomically(path, qj.dump());
  CHECK_NOTHROW(check_hf_config(path, qwen2_cfg()));
  qj.set("max_window_layers", Json(0));
  qj.set("sliding_window", Json(16));
  replace_file_atomically(path, qj.dump());
  CHECK_NOTHROW(check_hf_config(path, qwen2_cfg()));
  // A Qwen2 job with a window takes the layers windowed by max_window_layers 0
  // without layer_types, and names the layers a larger one leaves in full.
  Json wj = parse_json(read_text_file(config_with(windowed(qwen2_cfg()), "layer_types", nullptr)), "c");
  replace_file_atomically(path, wj.dump());
  CHECK_NOTHROW(check_hf_config(path, windowed(qwen2_cfg())));
  wj.set("max_window_layers", Json(1));
  replace_file_atomically(path, wj.dump());
  CHECK_THROWS_WITH(check_hf_config(path, windowed(qwen2_cfg())),
                    Contains("max_window_layers is 1: the layers from it on are windowed: layer 0 attends in "
                             "full, but model.sliding_window is 4 in every layer (max_window_layers: 0)"));
  CHECK_THROWS_WITH(check_hf_config(path, windowed(qwen2_cfg(), 8)),
                    Contains("sliding_window is 4, but model.sliding_window is 8"));
  // Qwen3-MoE windows every layer whatever max_window_layers says (transformers 5 has none).
  Json mj = parse_json(read_text_file(config_with(windowed(qwen3_moe_cfg()), "layer_types", nullptr)), "c");
  mj.set("max_window_layers", Json(2));
  replace_file_atomically(path, mj.dump());
  CHECK_NOTHROW(check_hf_config(path, windowed(qwen3_moe_cfg())));
  CHECK_THROWS_WITH(check_hf_config(path, qwen3_moe_cfg()),
                    Contains("use_sliding_window is true with sliding_window 4, below model.max_seq_len 16, in "
                             "layers 0, 1 (Qwen3-MoE windows every layer), but model.sliding_window is null"));
  // A window-less Qwen2 job refuses a windowed Qwen2 export by the window.
  CHECK_THROWS_WITH(check_hf_config(config_with(windowed(qwen2_cfg()), "", nullptr), qwen2_cfg()),
                    Contains("use_sliding_window is true with sliding_window 4, below model.max_seq_len 16, in "
                             "layers 0, 1 (layer_types), but model.sliding_window is null (full causal attention)"));
  // A Mixtral config for a job whose MoE is every other layer.
  model::ModelConfig every2 = mixtral_cfg();
  every2.moe_every = 2;
  CHECK_THROWS_WITH(check_hf_config(config_with(mixtral_cfg(), "", nullptr), every2),
                    Contains("a Mixtral model has an MoE in every layer, but model.moe.every is 2"));
  fs::remove_all(scratch_dir());
}

TEST_CASE("hf config: DeepSeek's YaRN mscale pair exports and is checked as DeepseekV3Config's keys",
          "[cpu][checkpoint]") {
  const model::ModelConfig cfg = deepseek_yarn_cfg();
  const Json exported = parse_json(hf_config_json(cfg), "c").at("rope_scaling");
  CHECK(exported.at("mscale").as_number() == 1.0);
  CHECK(exported.at("mscale_all_dim").as_number() == 0.6);
  CHECK(exported.at("attention_factor").as_number() ==
        Approx((0.1 * std::log(4.0) + 1) / (0.06 * std::log(4.0) + 1)));
  // As DeepSeek publishes it: "type" (transformers 4's key) and no attention_factor, which
  // transformers then computes from the pair.
  Json hub = parse_json(R"({"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 1.0,
    "mscale_all_dim": 0.6, "original_max_position_embeddings": 16, "type": "yarn"})", "r");
  CHECK_NOTHROW(check_hf_config(config_with(cfg, "rope_scaling", &hub), cfg));
  hub.set("mscale_all_dim", Json(1.0));
  CHECK_THROWS_WITH(check_hf_config(config_with(cfg, "rope_scaling", &hub), cfg),
                    Contains("rope_scaling.mscale_all_dim is 1, but model.rope_scaling.mscale_all_dim is 0.6") &&
                        Contains("rope_scaling.attention_factor is 1, but model.rope_scaling.attention_factor "
                                 "is 1.0511"));
  // Without the pair the job's softmax multiplier and attention factor are not the file's.
  CHECK_THROWS_WITH(check_hf_config(config_with(cfg, "rope_scaling", nullptr), cfg),
                    Contains("plain RoPE, but model.rope_scaling is set"));
  model::ModelConfig no_pair = cfg;
  no_pair.rope_scaling = yarn_scaling(4.0, 16.0, 32.0, 1.0, 0.0, cfg.mla.qk_rope, cfg.rope_theta);
  CHECK_THROWS_WITH(check_hf_config(config_with(cfg, "", nullptr), no_pair),
                    Contains("rope_scaling.mscale is 1, but model.rope_scaling.mscale is 0") &&
                        Contains("rope_scaling.mscale_all_dim is 0.6, but model.rope_scaling.mscale_all_dim is 0"));
}

TEST_CASE("hf config: DeepSeek's sequence-wise balance loss exports as aux_loss_alpha, seq_aux",
          "[cpu][checkpoint]") {
  model::ModelConfig cfg = deepseek_cfg();
  CHECK(parse_json(hf_config_json(cfg), "c").at("aux_loss_alpha").as_number() == 0.0);
  cfg.moe.seq_aux_loss_coeff = 1e-4f;
  const Json j = parse_json(hf_config_json(cfg), "c");
  CHECK(j.at("aux_loss_alpha").as_number() == 1e-4);
  CHECK(j.at("seq_aux").as_bool());
  CHECK_NOTHROW(check_hf_config(config_with(cfg, "", nullptr), cfg));
  fs::remove_all(scratch_dir());
}

TEST_CASE("hf config: a model no transformers class computes is refused by its key",
          "[cpu][checkpoint]") {
  using Change = std::function<void(model::ModelConfig&)>;
  struct Refusal {
    model::ModelConfig base;
    Change change;
    std::string message;
  };
  const Refusal refusals[] = {
      {gpt2_cfg(), [](auto& c) { c.moe_enabled = true; }, "model.moe: GPT-2 blocks with MoE layers"},
      {mixtral_cfg(), [](auto& c) { c.moe_every = 2; }, "model.moe.every is 2"},
      {mixtral_cfg(), [](auto& c) { c.moe.n_shared_experts = 1; }, "model.moe.n_shared_experts is 1"},
      {mixtral_cfg(), [](auto& c) { c.moe.balance = model::MoeBalance::aux_free; },
       "model.moe.balance is aux_free"},
      {mixtral_cfg(), [](auto& c) { c.qkv_bias = true; },
       "model.moe.n_shared_experts 0 and shared_expert_gate false: an MoE with model.qkv_bias exports "
       "as Qwen2MoeForCausalLM"},
      {mixtral_cfg(), [](auto& c) { c.moe.normalize_topk = false; },
       "model.moe.normalize_topk is false: MixtralForCausalLM renormalises"},
      {mixtral_cfg(), [](auto& c) { c.moe.sigmoid = true; }, "model.moe.score is sigmoid: "},
      {qwen3_moe_cfg(), [](auto& c) { c.moe.sigmoid = true; }, "model.moe.score is sigmoid: "},
      {mixtral_cfg(), [](auto& c) { c.moe_first_dense = 1; }, "model.moe.first_dense is 1: MixtralForCausalLM"},
      {qwen3_moe_cfg(), [](auto& c) { c.moe.topk_scaling = 2.5f; },
       "model.moe.topk_scaling_factor is 2.5: Qwen3MoeForCausalLM combines"},
      {qwen2_moe_cfg(), [](auto& c) { c.moe.shared_gate = false; },
       "an MoE with model.qkv_bias exports as Qwen2MoeForCausalLM, whose shared expert is gated"},
      {qwen2_moe_cfg(), [](auto& c) { c.qk_norm = true; }, "model.qk_norm with model.qkv_bias: no Hugging "
       "Face MoE class has both"},
      {qwen3_moe_cfg(), [](auto& c) { c.moe.n_groups = 4; },
       "model.moe.n_groups is 4: Qwen3MoeForCausalLM routes over all its experts"},
      {qwen3_moe_cfg(), [](auto& c) { c.moe.n_shared_experts = 2; },
       "model.moe.n_shared_experts is 2: Qwen3MoeForCausalLM has no shared experts"},
      {qwen3_cfg(), [](auto& c) { c.qkv_bias = true; },
       "model.qk_norm with model.qkv_bias: no Hugging Face class"},
      {gpt2_cfg(), [](auto& c) { c.sliding_window = 4; },
       "model.sliding_window is 4: no Hugging Face class computes GPT-2 blocks with a sliding window"},
      {deepseek_cfg(), [](auto& c) { c.sliding_window = 4; },
       "model.sliding_window is 4: DeepseekV3ForCausalLM has no sliding window"},
      {deepseek_cfg(), [](auto& c) { c.norm_eps = 1e-5f; },
       "model.norm_eps is 1e-05: DeepseekV3ForCausalLM's q_a_layernorm and kv_a_layernorm take eps 1e-6"},
      {mla_dense_cfg(), [](auto& c) { c.norm_eps = 1e-5f; }, "model.norm_eps is 1e-05: "},
      {deepseek_cfg(), [](auto& c) { c.moe.sigmoid = false; },
       "model.moe.score is softmax: DeepseekV3ForCausalLM's router scores experts by a sigmoid"},
      {deepseek_cfg(), [](auto& c) { c.moe_every = 2; }, "model.moe.every is 2: DeepseekV3ForCausalLM"},
      {deepseek_cfg(), [](auto& c) { c.moe.shared_gate = true; },
       "model.moe.n_shared_experts 1 and shared_expert_gate true: DeepseekV3ForCausalLM adds"},
      {deepseek_cfg(), [](auto& c) { c.moe.n_shared_experts = 0; }, "model.moe.n_shared_experts 0 and "},
  };
  for (const Refusal& r : refusals) {
    INFO(r.message);
    model::ModelConfig cfg = r.base;
    r.change(cfg);
    CHECK_THROWS_WITH(hf_architecture(cfg), Contains(r.message));
    CHECK_THROWS_AS(hf_config_json(cfg), InputError);
  }
  // An MLA job is refused on import too, before any key is compared.
  model::ModelConfig mla = deepseek_cfg();
  mla.moe.sigmoid = false;
  CHECK_THROWS_WITH(check_hf_config(config_with(deepseek_cfg(), "", nullptr), mla),
                    Contains("model.moe.score is softmax: "));
  // DeepSeek-V3's routing is DeepseekV3ForCausalLM's whatever its balance
  // (its bias exported as zeros without aux_free), top-k weighting or groups.
  for (auto change : {+[](model::ModelConfig& c) { c.moe.balance = model::MoeBalance::aux_loss; },
                      +[](model::ModelConfig& c) { c.moe.normalize_topk = false; },
                      +[](model::ModelConfig& c) { c.moe.n_groups = 1, c.moe.top_groups = 1; },
                      +[](model::ModelConfig& c) { c.moe.topk_scaling = 1.0f; }}) {
    model::ModelConfig c = deepseek_cfg();
    change(c);
    CHECK(hf_architecture(c) == "DeepseekV3ForCausalLM");
    CHECK_NOTHROW(check_hf_config(config_with(c, "", nullptr), c));
  }
  // A windowed GPT-2 is refused on import too, before any key is compared.
  CHECK_THROWS_WITH(hf_class(windowed(gpt2_cfg())), Contains("model.sliding_window is 4: no Hugging Face class"));
  CHECK_THROWS_WITH(check_hf_config(config_with(gpt2_cfg(), "", nullptr), windowed(gpt2_cfg())),
                    Contains("model.sliding_window is 4: no Hugging Face class computes GPT-2 blocks"));
  fs::remove_all(scratch_dir());
  // Qwen3-MoE: an MoE with q/k norms, in any every-th layer, either top-k weighting.
  model::ModelConfig normed_moe = mixtral_cfg();
  normed_moe.qk_norm = true;
  CHECK(hf_architecture(normed_moe) == "Qwen3MoeForCausalLM");
  CHECK(hf_architecture(qwen3_moe_cfg()) == "Qwen3MoeForCausalLM");
}

TEST_CASE("hf config: a Mistral 7B v0.3-shaped config.json is a Llama's, a v0.1-shaped one a window of "
          "4096 keys", "[cpu][checkpoint]") {
  fs::create_directories(scratch_dir());
  // Mistral 7B v0.3-shaped config.json (sliding_window null): a Llama, taken
  // by a window-less llama job; v0.1-shaped (sliding_window 4096, theta 1e4,
  // vocabulary 32000): a job with that window, or one no longer than it.
  const std::string mistral_v03 = R"({"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32768})";
  model::ModelConfig m7b = llama_cfg();
  m7b.n_layer = 32, m7b.d_model = 4096, m7b.n_head = 32, m7b.n_kv_head = 8, m7b.d_ff = 14336;
  m7b.vocab_size = 32768, m7b.max_seq_len = 8192, m7b.rope_theta = 1e6f, m7b.norm_eps = 1e-5f;
  const std::string v03 = (scratch_dir() / "mistral_v03.json").string();
  replace_file_atomically(v03, mistral_v03);
  CHECK_NOTHROW(check_hf_config(v03, m7b));
  CHECK_THROWS_WITH(check_hf_config(v03, windowed(m7b, 4096)),
                    Contains("sliding_window is null (full causal attention), but model.sliding_window is 4096"));
  Json v01 = parse_json(mistral_v03, "v01");
  v01.set("sliding_window", Json(4096));
  v01.set("rope_theta", Json(10000.0));
  v01.set("vocab_size", Json(32000));
  const std::string v01_path = (scratch_dir() / "mistral_v01.json").string();
  replace_file_atomically(v01_path, v01.dump());
  model::ModelConfig v01_job = windowed(m7b, 4096);
  v01_job.vocab_size = 32000, v01_job.rope_theta = 1e4f;
  CHECK_NOTHROW(check_hf_config(v01_path, v01_job));
  v01_job.sliding_window = 0;  // 8192-token sequences: the window shows
  CHECK_THROWS_WITH(check_hf_config(v01_path, v01_job),
                    Contains("sliding_window is 4096, below model.max_seq_len 8192, but model.sliding_window is "
                             "null (full causal attention)"));
  v01_job.max_seq_len = 4096;  // no sequence longer than the window: full causal attention
  CHECK_NOTHROW(check_hf_config(v01_path, v01_job));
  fs::remove_all(scratch_dir());
}

TEST_CASE("hf config: configs/llama-1b.yaml is Llama 3.2 1B, configs/llama-8b.yaml Llama 3 8B, "
          "configs/qwen2-0.5b.yaml Qwen2.5 0.5B, configs/qwen3-{0.6b,1.7b}.yaml Qwen3 0.6B, 1.7B, "
          "configs/qwen3-30b-a3b.yaml Qwen3-30B-A3B, configs/mistral-7b.yaml Mistral 7B v0.1, "
          "configs/deepseek-v3-shaped.yaml DeepSeek-V3",
          "[cpu][checkpoint]") {
  // Their hub config.json files' architecture keys (meta-llama/Llama-3.2-1B, Meta-Llama-3-8B,
  // Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B, Qwen/Qwen3-30B-A3B,
  // mistralai/Mistral-7B-v0.1).
  const std::string llama32_1b = R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0,
    "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
    "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "vocab_size": 128256})";
  const std::string llama3_8b = R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "vocab_size": 128256})";
  const std::string qwen25_05b = R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
    "use_mrope": false, "use_sliding_window": false, "vocab_size": 151936})";
  const std::string qwen3_17b = R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";
  const std::string qwen3_06b = R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";
  const std::string qwen3_30b_a3b = R"({"architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
    "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})";
  const std::string mistral_7b_v01 = R"({"architectures": ["MistralForCausalLM"], "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": true, "vocab_size": 32000})";
  // deepseek-ai/DeepSeek-V3's architecture keys, less its fp8 quantization_config and its
  // YaRN rope_scaling (both checked below, against the shaped job with that YaRN).
  const std::string deepseek_v3 = R"({"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
    "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06, "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "seq_aux": true, "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true, "v_head_dim": 128,
    "vocab_size": 129280})";
  const fs::path dir = scratch_dir();
  fs::create_directories(dir);
  for (const auto& [yaml, json] : {std::pair{"llama-1b.yaml", llama32_1b}, {"llama-8b.yaml", llama3_8b},
                                   {"mistral-7b.yaml", mistral_7b_v01},
                                   {"qwen2-0.5b.yaml", qwen25_05b}, {"qwen3-1.7b.yaml", qwen3_17b},
                                   {"qwen3-0.6b.yaml", qwen3_06b}, {"qwen3-30b-a3b.yaml", qwen3_30b_a3b},
                                   {"deepseek-v3-shaped.yaml", deepseek_v3}}) {
    INFO(yaml);
    const std::string path = (dir / (std::string(yaml) + ".json")).string();
    replace_file_atomically(path, json);
    JobSpec spec = load_job_spec(std::string(TRAINER_SOURCE_DIR) + "/configs/" + yaml);
    // The shaped file has 64 layers, for its pipeline stages; DeepSeek-V3 has 61.
    if (std::string(yaml) == "deepseek-v3-shaped.yaml") spec.model.n_layer = 61;
    CHECK_NOTHROW(check_hf_config(path, model_config(spec)));
  }
  // The hub file whole: its YaRN (with DeepSeek's mscale pair) is the shaped job's with the
  // same rope_scaling, and its fp8 blocks are read (dequantized, hf_fp8.h).
  Json hub = parse_json(deepseek_v3, "deepseek_v3");
  hub.set("rope_scaling", parse_json(R"({"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
    "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"})", "r"));
  const std::string path = (dir / "deepseek-v3-hub.json").string();
  replace_file_atomically(path, hub.dump(2));
  JobSpec spec = load_job_spec(std::string(TRAINER_SOURCE_DIR) + "/configs/deepseek-v3-shaped.yaml");
  spec.model.n_layer = 61;
  spec.model.rope_scaling = {.enabled = true, .type = RopeType::yarn, .factor = 40,
                             .original_max_position_embeddings = 4096, .attention_factor = std::nullopt, .mscale = 1.0, .mscale_all_dim = 1.0};
  CHECK_NOTHROW(check_hf_config(path, model_config(spec)));
  hub.set("quantization_config", parse_json(R"({"activation_scheme": "dynamic", "fmt": "e4m3",
    "quant_method": "fp8", "weight_block_size": [128, 128]})", "q"));
  replace_file_atomically(path, hub.dump(2));
  CHECK_NOTHROW(check_hf_config(path, model_config(spec)));
  fs::remove_all(dir);
}
