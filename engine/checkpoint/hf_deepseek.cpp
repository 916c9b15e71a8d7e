// See hf_deepseek.h. Defaults are DeepseekV3Config's; semantics are
// transformers' modeling_deepseek_v3.py (test/checkpoint/hf_fixtures has an
// independent forward of it).
#include "engine/checkpoint/hf_deepseek.h"

#include <fmt/format.h>

#include <filesystem>

#include "engine/checkpoint/files.h"
#include "kernels/error.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

void check_deepseek_job(const model::ModelConfig& cfg) {
  TRAINER_INPUT_CHECK(cfg.sliding_window <= 0, "model.sliding_window is {}: DeepseekV3ForCausalLM has no "
                      "sliding window", cfg.sliding_window);
  // DeepseekV3RMSNorm(q_lora_rank) and (kv_lora_rank) take the class default.
  TRAINER_INPUT_CHECK(tidy(cfg.norm_eps) == 1e-6, "model.norm_eps is {}: DeepseekV3ForCausalLM's "
                      "q_a_layernorm and kv_a_layernorm take eps 1e-6 whatever rms_norm_eps is, and this "
                      "trainer's latent norms take model.norm_eps (DeepSeek-V3's is 1e-6)", tidy(cfg.norm_eps));
  if (!cfg.moe_enabled) return;  // dense: first_k_dense_replace = num_hidden_layers
  const model::MoeConfig& m = cfg.moe;
  TRAINER_INPUT_CHECK(cfg.moe_every == 1, "model.moe.every is {}: DeepseekV3ForCausalLM has an MoE in "
                      "every layer from first_k_dense_replace (model.moe.first_dense) on", cfg.moe_every);
  TRAINER_INPUT_CHECK(m.sigmoid, "model.moe.score is softmax: DeepseekV3ForCausalLM's router scores "
                      "experts by a sigmoid (score: sigmoid)");
  TRAINER_INPUT_CHECK(m.n_shared_experts >= 1 && !m.shared_gate, "model.moe.n_shared_experts {} and "
                      "shared_expert_gate {}: DeepseekV3ForCausalLM adds n_shared_experts >= 1 shared "
                      "experts, ungated", m.n_shared_experts, m.shared_gate);
}

void deepseek_config(const model::ModelConfig& cfg, Json& j) {
  const model::MlaConfig& a = cfg.mla;
  const model::MoeConfig& m = cfg.moe;
  j.set("model_type", Json("deepseek_v3"));
  j.set("vocab_size", Json(cfg.vocab_size));
  j.set("hidden_size", Json(cfg.d_model));
  j.set("intermediate_size", Json(cfg.d_ff));
  j.set("num_hidden_layers", Json(cfg.n_layer));
  j.set("num_attention_heads", Json(cfg.n_head));
  j.set("num_key_value_heads", Json(cfg.n_head));
  j.set("q_lora_rank", a.q_lora_rank > 0 ? Json(a.q_lora_rank) : Json());
  j.set("kv_lora_rank", Json(a.kv_lora_rank));
  j.set("qk_nope_head_dim", Json(a.qk_nope));
  j.set("qk_rope_head_dim", Json(a.qk_rope));
  j.set("qk_head_dim", Json(a.qk_dim()));
  // transformers rotates head_dim dims of each head (DeepseekV3Config sets it so).
  j.set("head_dim", Json(a.qk_rope));
  j.set("v_head_dim", Json(a.v_dim));
  // A dense model is every layer below first_k_dense_replace; the MoE keys
  // are then the class's, never read.
  j.set("first_k_dense_replace", Json(cfg.moe_enabled ? cfg.moe_first_dense : cfg.n_layer));
  j.set("moe_layer_freq", Json(int64_t{1}));
  j.set("moe_intermediate_size", Json(m.d_ff_expert));
  j.set("n_routed_experts", Json(m.n_experts));
  j.set("n_shared_experts", Json(m.n_shared_experts));
  j.set("num_experts_per_tok", Json(m.top_k));
  j.set("n_group", Json(m.n_groups));
  j.set("topk_group", Json(m.top_groups));
  j.set("norm_topk_prob", Json(m.normalize_topk));
  j.set("routed_scaling_factor", Json::real(tidy(m.topk_scaling)));
  // DeepSeek's own modeling code and vLLM read these two.
  j.set("scoring_func", Json("sigmoid"));
  j.set("topk_method", Json("noaux_tc"));
  // Training-only, for the record (as router_aux_loss_coef for Mixtral): DeepSeek's
  // MoEGate takes alpha with seq_aux true as the sequence-wise balance loss.
  j.set("aux_loss_alpha", Json::real(tidy(m.seq_aux_loss_coeff)));
  j.set("seq_aux", Json(true));
  j.set("num_nextn_predict_layers", Json(int64_t{0}));
  j.set("hidden_act", Json("silu"));
  j.set("max_position_embeddings", Json(max_position_embeddings(cfg)));
  j.set("rms_norm_eps", Json::real(tidy(cfg.norm_eps)));
  j.set("rope_theta", Json::real(tidy(cfg.rope_theta)));
  if (cfg.rope_scaling.active()) j.set("rope_scaling", rope_scaling_json(cfg.rope_scaling));
  j.set("rope_interleave", Json(true));  // the tensors are written so (deepseek_rope_rows)
  j.set("attention_bias", Json(false));
  j.set("attention_dropout", Json::real(0.0));
}

void check_deepseek_config(const ConfigCheck& c, const model::ModelConfig& cfg) {
  const model::MlaConfig& a = cfg.mla;
  c.same_int("hidden_size", 7168, cfg.d_model, "model.d_model");
  c.same_int("num_hidden_layers", 61, cfg.n_layer, "model.n_layer");
  c.same_int("num_attention_heads", 128, cfg.n_head, "model.n_head");
  c.same_int("num_key_value_heads", c.number("num_attention_heads", 128), cfg.n_kv_head, "model.n_kv_head");
  c.same_int("vocab_size", 129280, cfg.vocab_size, "model.vocab_size");
  c.same_float("rms_norm_eps", 1e-6, cfg.norm_eps, "model.norm_eps");
  check_rope(c, cfg, 10000.0);
  c.same_flag("tie_word_embeddings", false, cfg.tie_embeddings, "model.tie_embeddings");
  const std::string act = c.text("hidden_act", "silu");
  c.require(act == "silu", "hidden_act is \"{}\": this trainer's llama computes SwiGLU (silu)", act);
  c.off("attention_bias", "this trainer's multi-head latent attention has no biases");

  // q_lora_rank null: q_proj straight from the hidden state.
  const double q_lora = c.window("q_lora_rank", 1536);
  c.require(q_lora == static_cast<double>(a.q_lora_rank), "q_lora_rank is {}, but model.mla.q_lora_rank is {}",
            q_lora > 0 ? fmt::format("{}", q_lora) : "null",
            a.q_lora_rank > 0 ? fmt::format("{}", a.q_lora_rank) : "null");
  c.same_int("kv_lora_rank", 512, a.kv_lora_rank, "model.mla.kv_lora_rank");
  c.same_int("qk_nope_head_dim", 128, a.qk_nope, "model.mla.qk_nope_head_dim");
  c.same_int("qk_rope_head_dim", 64, a.qk_rope, "model.mla.qk_rope_head_dim");
  c.same_int("v_head_dim", 128, a.v_dim, "model.mla.v_head_dim");
  // transformers' RoPE rotates head_dim dims, which DeepseekV3Config sets to qk_rope_head_dim.
  const double rope = c.number("qk_rope_head_dim", 64), head_dim = c.number("head_dim", rope);
  c.require(head_dim == rope, "head_dim is {}, but qk_rope_head_dim is {}: transformers would rotate "
            "head_dim dims of each q/k head", head_dim, rope);

  const double layers = c.number("num_hidden_layers", 61);
  const double first_moe = c.number("first_k_dense_replace", 3);
  if (!cfg.moe_enabled) {
    c.require(first_moe >= layers, "first_k_dense_replace is {}: the layers from it on are MoE, but the job "
              "has no model.moe", first_moe);
    c.same_int("intermediate_size", 18432, cfg.d_ff, "model.d_ff");
    return;
  }
  const model::MoeConfig& m = cfg.moe;
  c.same_int("first_k_dense_replace", 3, cfg.moe_first_dense, "model.moe.first_dense");
  if (cfg.has_dense_mlp()) c.same_int("intermediate_size", 18432, cfg.d_ff, "model.d_ff");
  c.same_int("moe_layer_freq", 1, cfg.moe_every, "model.moe.every");
  c.same_int("n_routed_experts", 256, m.n_experts, "model.moe.n_experts");
  c.same_int("num_experts_per_tok", 8, m.top_k, "model.moe.top_k");
  c.same_int("moe_intermediate_size", 2048, m.d_ff_expert, "model.moe.d_ff_expert");
  c.same_int("n_shared_experts", 1, m.n_shared_experts, "model.moe.n_shared_experts");
  c.same_float("routed_scaling_factor", 2.5, m.topk_scaling, "model.moe.topk_scaling_factor");
  c.same_int("n_group", 8, m.n_groups, "model.moe.n_groups");
  c.same_int("topk_group", 4, m.top_groups, "model.moe.top_groups");
  c.same_flag("norm_topk_prob", true, m.normalize_topk, "model.moe.normalize_topk");
  const std::string scoring = c.text("scoring_func", "sigmoid");
  c.require(scoring == "sigmoid", "scoring_func is \"{}\": DeepSeek-V3 routes by sigmoid scores", scoring);
  const std::string method = c.text("topk_method", "noaux_tc");
  c.require(method == "noaux_tc", "topk_method is \"{}\": DeepSeek-V3 chooses by score plus "
            "e_score_correction_bias within the best groups (noaux_tc)", method);
}

DeepseekSource deepseek_source(const std::string& path) {
  DeepseekSource s;
  const fs::path config = fs::path(path) / "config.json";
  if (!fs::is_directory(path) || !fs::exists(config)) return s;
  const Json j = parse_json(read_text_file(config.string()), config.string());
  if (const Json* v = j.find("rope_interleave"); v && v->kind() == Json::Kind::boolean) s.rope_interleave = v->as_bool();
  if (const Json* v = j.find("num_nextn_predict_layers"); v && v->is_number())
    s.mtp_layers = static_cast<int64_t>(v->as_number());
  return s;
}

HostTensor deepseek_rope_rows(const model::ModelConfig& cfg, const std::string& ours, HostTensor t,
                              bool to_hf) {
  const model::MlaConfig& a = cfg.mla;
  if (!a.enabled) return t;  // a llama's q_proj is rotate-half in both layouts
  const int64_t r = a.qk_rope, half = r / 2;
  std::vector<int64_t> starts;  // each RoPE part's first row
  if (ends_with(ours, ".self_attn.q_b_proj.weight") || ends_with(ours, ".self_attn.q_proj.weight")) {
    for (int64_t h = 0; h < cfg.n_head; ++h) starts.push_back(h * a.qk_dim() + a.qk_nope);
  } else if (ends_with(ours, ".self_attn.kv_a_proj_with_mqa.weight")) {
    starts.push_back(a.kv_lora_rank);
  } else {
    return t;
  }
  TRAINER_CHECK(t.shape.size() == 2, "{}: a RoPE projection of {} dims", ours, t.shape.size());
  const int64_t width = t.shape[1];
  std::vector<float> part(static_cast<size_t>(r * width));
  for (int64_t s : starts) {
    TRAINER_CHECK(s + r <= t.shape[0], "{}: RoPE rows past its {} rows", ours, t.shape[0]);
    float* base = t.data.data() + s * width;
    // Pair j is rows (2j, 2j + 1) interleaved, rows (j, half + j) as halves.
    for (int64_t j = 0; j < half; ++j)
      for (int64_t pair = 0; pair < 2; ++pair) {
        const int64_t inter = 2 * j + pair, halves = pair * half + j;
        const int64_t from = to_hf ? halves : inter, to = to_hf ? inter : halves;
        std::copy(base + from * width, base + (from + 1) * width, part.data() + to * width);
      }
    std::copy(part.begin(), part.end(), base);
  }
  return t;
}

}  // namespace trainer::engine::checkpoint
