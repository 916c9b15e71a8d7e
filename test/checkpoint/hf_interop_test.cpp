// Hugging Face interop: export -> import gives identical parameters and
// logits for both families; the exported layout is HF's (fused, transposed
// Conv1D, unpadded vocabulary); bf16 sources, prefix-less GPT-2 names and
// sharded index files load.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_config.h"
#include "engine/checkpoint/hf_host_tensor.h"
#include "engine/checkpoint/hf_interop.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/data/tokenizer.h"
#include "engine/hf_reference.h"
#include "engine/json.h"
#include "engine/model_from_spec.h"
#include "engine/trainer.h"
#include "kernels/memory.h"
#include "kernels/numeric.h"
#include "parallel/communicator.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::engine::checkpoint;
using testing::fresh_temp_dir;
using testing::quiet_options;
namespace fs = std::filesystem;

namespace {

JobSpec tiny_spec(Family family, const fs::path& dir) {
  JobSpec s = testing::tiny_job(family, 4);
  s.run.dir = dir.string();
  s.optimizer.lr = 1e-2;  // large steps: trained weights far from their init
  s.optimizer.warmup_steps = 0;
  return s;
}

// The llama job with an MoE in every layer: MixtralForCausalLM's model.
JobSpec mixtral_spec(const fs::path& dir) {
  JobSpec s = tiny_spec(Family::llama, dir);
  s.model.moe.enabled = true;
  s.model.moe.n_experts = 4;
  s.model.moe.top_k = 2;
  s.model.moe.d_ff_expert = 24;
  return s;
}

// The llama job with q, k and v biases and a tied head: Qwen2ForCausalLM's model.
JobSpec qwen2_spec(const fs::path& dir) {
  JobSpec s = tiny_spec(Family::llama, dir);
  s.model.qkv_bias = s.model.tie_embeddings = true;
  return s;
}

// The llama job with per-head q/k norms and a tied head: Qwen3ForCausalLM's model.
JobSpec qwen3_spec(const fs::path& dir) {
  JobSpec s = tiny_spec(Family::llama, dir);
  s.model.qk_norm = s.model.tie_embeddings = true;
  return s;
}

// The llama job whose every layer sees itself and the 3 keys before it:
// MistralForCausalLM's model.
JobSpec mistral_spec(const fs::path& dir) {
  JobSpec s = tiny_spec(Family::llama, dir);
  s.model.sliding_window = 4;
  return s;
}

// The Qwen2 job with that window: use_sliding_window in every layer.
JobSpec qwen2_window_spec(const fs::path& dir) {
  JobSpec s = qwen2_spec(dir);
  s.model.sliding_window = 4;
  return s;
}

// The llama job with YaRN (factor 4 over 8 positions): its rope_scaling and
// max_position_embeddings (factor x original) in config.json.
JobSpec yarn_spec(const fs::path& dir) {
  JobSpec s = tiny_spec(Family::llama, dir);
  s.model.rope_scaling.enabled = true;
  s.model.rope_scaling.type = RopeType::yarn;
  s.model.rope_scaling.factor = 4.0;
  s.model.rope_scaling.original_max_position_embeddings = 8;
  return s;
}

// The MoE llama job with q/k norms, an MoE in layer 1 only (dense layer 0)
// and top-k weights not renormalised: Qwen3MoeForCausalLM's model.
JobSpec qwen3_moe_spec(const fs::path& dir) {
  JobSpec s = mixtral_spec(dir);
  s.model.qk_norm = true;
  s.model.moe.every = 2;
  s.model.moe.normalize_topk = false;
  return s;
}

// The MoE llama job with q/k/v biases, a dense layer 0 and a gated shared
// expert, top-k weights not renormalised: Qwen2MoeForCausalLM's model.
JobSpec qwen2_moe_spec(const fs::path& dir) {
  JobSpec s = mixtral_spec(dir);
  s.model.qkv_bias = true;
  s.model.moe.first_dense = 1;
  s.model.moe.normalize_topk = false;
  s.model.moe.n_shared_experts = 2;
  s.model.moe.shared_expert_gate = true;
  return s;
}

// The MLA llama job with a dense layer 0 and DeepSeek's MoE in layer 1
// (sigmoid router with the aux_free bias, 4 groups of 2 experts, top-2
// groups, x 2.5, one shared expert): DeepseekV3ForCausalLM's model.
// deepseek_dense_spec: MLA without a q latent and with dense MLPs.
JobSpec deepseek_spec(const fs::path& dir) {
  JobSpec s = tiny_spec(Family::llama, dir);
  s.model.n_kv_head = 4, s.model.norm_eps = 1e-6;
  s.model.mla = {.enabled = true, .q_lora_rank = 24, .kv_lora_rank = 16, .qk_nope_head_dim = 8,
                 .qk_rope_head_dim = 4, .v_head_dim = 6};
  MoESpec& m = s.model.moe;
  m.enabled = true, m.n_experts = 8, m.top_k = 2, m.d_ff_expert = 12, m.n_shared_experts = 1;
  m.first_dense = 1, m.balance = Balance::aux_free, m.score = RouterScore::sigmoid;
  m.topk_scaling_factor = 2.5, m.n_groups = 4, m.top_groups = 2, m.bias_update_rate = 0.05;
  return s;
}
JobSpec deepseek_dense_spec(const fs::path& dir) {
  JobSpec s = deepseek_spec(dir);
  s.model.moe.enabled = false, s.model.mla.q_lora_rank = 0;
  return s;
}

// gpt2, llama, Qwen2- and Qwen3-style llama, Mixtral-, Qwen3-MoE- and
// Qwen2-MoE-style MoE llama, a windowed llama (Mistral) and Qwen2, and
// DeepSeek-V3's MLA (with its MoE, with aux_loss balancing, under YaRN with
// DeepSeek's mscale pair, and dense), each with its name.
JobSpec hf_job(const std::string& prefix, const std::string& name) {
  fs::path dir = fresh_temp_dir(prefix + "_" + name);
  JobSpec s = name == "gpt2"      ? tiny_spec(Family::gpt2, dir)
              : name == "llama"   ? tiny_spec(Family::llama, dir)
              : name == "llama_yarn" ? yarn_spec(dir)
              : name == "mistral" ? mistral_spec(dir)
              : name == "qwen2_window" ? qwen2_window_spec(dir)
              : name == "qwen2"   ? qwen2_spec(dir)
              : name == "qwen3"   ? qwen3_spec(dir)
              : name == "mixtral" ? mixtral_spec(dir)
              : name == "qwen2_moe" ? qwen2_moe_spec(dir)
              : name == "mla_dense" ? deepseek_dense_spec(dir)
              : name.rfind("deepseek", 0) == 0 ? deepseek_spec(dir)
                                  : qwen3_moe_spec(dir);
  if (name == "deepseek_v3_aux_loss") s.model.moe.balance = Balance::aux_loss;
  if (name == "deepseek_v3_yarn")  // DeepSeek's YaRN, its mscale pair in config.json
    s.model.rope_scaling = {.enabled = true, .type = RopeType::yarn, .factor = 4,
                            .original_max_position_embeddings = 16, .attention_factor = std::nullopt, .mscale = 0.8, .mscale_all_dim = 0.5};
  return s;
}
std::vector<std::pair<std::string, JobSpec>> hf_jobs(const std::string& prefix) {
  std::vector<std::pair<std::string, JobSpec>> jobs;
  for (const std::string name : {"gpt2", "llama", "llama_yarn", "qwen2", "qwen3", "mixtral", "qwen3_moe",
                                 "qwen2_moe", "mistral", "qwen2_window", "deepseek_v3", "deepseek_v3_aux_loss",
                                 "deepseek_v3_yarn", "mla_dense"})
    jobs.emplace_back(name, hf_job(prefix, name));
  return jobs;
}

std::map<std::string, std::vector<float>> params_of(Trainer& t) {
  std::map<std::string, std::vector<float>> out;
  const model::Buffers& b = t.model().buffers();
  for (const auto& p : b.params()) {
    Tensor v = b.get(p.value);
    std::vector<float> h(static_cast<size_t>(v.numel()));
    copy_to_host(h.data(), v);
    out[p.spec.name] = std::move(h);
  }
  return out;
}

std::vector<float> host_logits(Trainer& t) {
  Tensor x = t.model().logits(t.context());
  std::vector<float> h(static_cast<size_t>(x.numel()));
  copy_to_host(h.data(), x);
  return h;
}

// Per-token losses and logits of one fixed micro-batch.
std::pair<std::vector<float>, std::vector<float>> forward(Trainer& t, int vocab) {
  model::Model& m = t.model();
  std::vector<int32_t> ids(static_cast<size_t>(m.input_ids().numel())), tg(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
    tg[i] = static_cast<int32_t>((i * 53 + 5) % vocab);
  }
  copy_from_host(m.input_ids(), ids.data());
  copy_from_host(m.targets(), tg.data());
  m.forward(t.context());
  Tensor l = m.losses(t.context());
  std::vector<float> losses(static_cast<size_t>(l.numel()));
  copy_to_host(losses.data(), l);
  return {losses, host_logits(t)};
}

fs::path trained_export(const fs::path& dir, Trainer& a, const JobSpec& spec) {
  testing::train_losses(a, 1, 3);
  auto world = parallel::make_single_communicator("world");
  Checkpointer c(spec, *world, Device::cpu, {}, nullptr);
  c.save(3, a.model().buffers(), a.optimizer());
  fs::path out = dir / "hf";
  export_hf(dir.string(), out.string(), nullptr);  // from the run directory
  return out;
}

// A trained plain (bias-free, norm-free, window-less) Llama's export in
// dir/hf: what a job of another class is refused from, by its model_type.
fs::path plain_llama_export(const fs::path& dir, bool tied) {
  JobSpec llama = tiny_spec(Family::llama, dir);
  llama.model.tie_embeddings = tied;
  Trainer l(llama, quiet_options());
  return trained_export(dir, l, llama);
}

// A plain (bias-free, norm-free) tied Llama job started from the export at
// `out` is refused: with its config.json by model_type, without it by the
// first tensor it would have dropped.
void refused_as_plain_llama(const fs::path& out, const fs::path& dir, const std::string& with_config,
                            const std::string& without_config) {
  JobSpec llama = tiny_spec(Family::llama, dir);
  llama.model.tie_embeddings = true;
  Trainer b(llama, quiet_options());
  auto load = [&] { load_hf_weights(out.string(), model_config(llama), b.model().buffers(), b.context()); };
  CHECK_THROWS_WITH(load(), Catch::Matchers::Contains(with_config));
  fs::remove(out / "config.json");
  CHECK_THROWS_WITH(load(), Catch::Matchers::Contains(without_config));
}

}  // namespace

TEST_CASE("hf: export -> import gives identical parameters and logits", "[cpu][checkpoint]") {
  for (const auto& [name, spec] : hf_jobs("hf")) {
    INFO(name);
    fs::path dir = spec.run.dir;
    Trainer a(spec, quiet_options());
    fs::path out = trained_export(dir, a, spec);
    Trainer b(spec, quiet_options());
    auto before = params_of(b);
    load_hf_weights(out.string(), model_config(spec), b.model().buffers(), b.context());
    auto pa = params_of(a), pb = params_of(b);
    CHECK(pa == pb);
    CHECK(pb != before);
    auto [la, xa] = forward(a, spec.model.vocab_size);
    auto [lb, xb] = forward(b, spec.model.vocab_size);
    CHECK(la == lb);
    CHECK(xa == xb);
    fs::remove_all(dir);
  }
}

TEST_CASE("hf: exported GPT-2 uses HF names, Conv1D layout and the unpadded vocabulary",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_layout");
  JobSpec spec = tiny_spec(Family::gpt2, dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  auto ours = params_of(a);
  SafetensorsFile f((out / "model.safetensors").string());
  CHECK(f.metadata().at("format") == "pt");
  const int64_t C = 32, V = 200;
  CHECK(f.tensor("transformer.wte.weight").shape == std::vector<int64_t>{V, C});
  CHECK(f.tensor("transformer.h.1.attn.c_attn.weight").shape == std::vector<int64_t>{C, 3 * C});
  CHECK(f.tensor("transformer.h.1.mlp.c_fc.weight").shape == std::vector<int64_t>{C, 64});
  CHECK(!f.has("lm_head.weight"));  // tied, as GPT2LMHeadModel saves it
  CHECK(!f.has("transformer.h.0.attn.q_proj.weight"));
  auto attn = f.read_f32("transformer.h.1.attn.c_attn.weight");  // (in C, out 3C)
  auto& k = ours["transformer.h.1.attn.k_proj.weight"];          // (out C, in C)
  auto fc = f.read_f32("transformer.h.1.mlp.c_fc.weight");       // (in C, out F)
  auto& ofc = ours["transformer.h.1.mlp.c_fc.weight"];           // (out F, in C)
  for (int64_t i : {0, 5, 31})
    for (int64_t o : {0, 7, 31}) {
      CHECK(attn[i * 3 * C + C + o] == k[o * C + i]);
      CHECK(fc[i * 64 + o] == ofc[o * C + i]);
    }
  auto bias = f.read_f32("transformer.h.1.attn.c_attn.bias");
  CHECK(bias[2 * C + 3] == ours["transformer.h.1.attn.v_proj.bias"][3]);
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("model_type").as_string() == "gpt2");
  CHECK(cfg.at("architectures").items()[0].as_string() == "GPT2LMHeadModel");
  CHECK(cfg.at("n_embd").as_int() == C);
  CHECK(cfg.at("n_layer").as_int() == 2);
  CHECK(cfg.at("n_head").as_int() == 4);
  CHECK(cfg.at("n_positions").as_int() == 16);
  CHECK(cfg.at("vocab_size").as_int() == V);
  CHECK(cfg.at("layer_norm_epsilon").as_number() == Approx(1e-5));
  fs::remove_all(dir);
}

TEST_CASE("hf: llama config keys and untied head", "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_llama_cfg");
  JobSpec spec = tiny_spec(Family::llama, dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  SafetensorsFile f((out / "model.safetensors").string());
  CHECK(f.tensor("lm_head.weight").shape == std::vector<int64_t>{200, 32});
  CHECK(f.tensor("model.layers.0.self_attn.k_proj.weight").shape == std::vector<int64_t>{16, 32});
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("model_type").as_string() == "llama");
  CHECK(cfg.at("hidden_size").as_int() == 32);
  CHECK(cfg.at("intermediate_size").as_int() == 64);
  CHECK(cfg.at("num_attention_heads").as_int() == 4);
  CHECK(cfg.at("num_key_value_heads").as_int() == 2);
  CHECK(cfg.at("num_hidden_layers").as_int() == 2);
  CHECK(cfg.at("max_position_embeddings").as_int() == 16);
  CHECK(cfg.at("rope_theta").as_number() == 10000.0);
  CHECK(!cfg.at("tie_word_embeddings").as_bool());
  fs::remove_all(dir);
}

TEST_CASE("hf: a llama with qkv_bias is a Qwen2 export, and a bias-free llama refuses its biases",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_qwen2");
  JobSpec spec = qwen2_spec(dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  SafetensorsFile f((out / "model.safetensors").string());
  CHECK(f.tensor("model.layers.1.self_attn.q_proj.bias").shape == std::vector<int64_t>{32});
  CHECK(f.tensor("model.layers.1.self_attn.k_proj.bias").shape == std::vector<int64_t>{16});
  CHECK(f.tensor("model.layers.1.self_attn.v_proj.bias").shape == std::vector<int64_t>{16});
  CHECK(f.tensors().count("model.layers.1.self_attn.o_proj.bias") == 0);
  CHECK(f.tensors().count("lm_head.weight") == 0);  // tied
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("architectures").items()[0].as_string() == "Qwen2ForCausalLM");
  fs::path llama_dir = fresh_temp_dir("hf_qwen2_as_llama");
  refused_as_plain_llama(out, llama_dir, "Qwen2 is model.family llama with model.qkv_bias: true",
                         "tensor \"model.layers.0.self_attn.k_proj.bias\" is a bias the job's model has "
                         "not (a Qwen2 checkpoint needs model.qkv_bias: true)");
  // And a Qwen2 job started from a Llama export misses the biases by name.
  const fs::path llama_out = plain_llama_export(llama_dir, true);
  Trainer c(spec, quiet_options());
  CHECK_THROWS_WITH(load_hf_weights(llama_out.string(), model_config(spec), c.model().buffers(), c.context()),
                    Catch::Matchers::Contains("model_type is \"llama\", but the job's model is qwen2"));
  fs::remove(llama_out / "config.json");
  CHECK_THROWS_WITH(load_hf_weights(llama_out.string(), model_config(spec), c.model().buffers(), c.context()),
                    Catch::Matchers::Contains("no tensor \"model.layers.0.self_attn.q_proj.bias\" (expected a "
                                              "Qwen2ForCausalLM checkpoint)"));
  fs::remove_all(dir);
  fs::remove_all(llama_dir);
}

TEST_CASE("hf: a llama with qk_norm is a Qwen3 export, and a llama without refuses its norms",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_qwen3");
  JobSpec spec = qwen3_spec(dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  SafetensorsFile f((out / "model.safetensors").string());
  CHECK(f.tensor("model.layers.1.self_attn.q_norm.weight").shape == std::vector<int64_t>{8});
  CHECK(f.tensor("model.layers.1.self_attn.k_norm.weight").shape == std::vector<int64_t>{8});
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("architectures").items()[0].as_string() == "Qwen3ForCausalLM");
  CHECK(cfg.at("head_dim").as_int() == 8);
  JobSpec both = spec;
  both.model.qkv_bias = true;
  Trainer c(both, quiet_options());
  CHECK_THROWS_WITH(load_hf_weights(out.string(), model_config(both), c.model().buffers(), c.context()),
                    Catch::Matchers::Contains("model.qk_norm with model.qkv_bias: no Hugging Face class"));
  refused_as_plain_llama(out, dir, "Qwen3 is model.family llama with model.qk_norm: true",
                         "tensor \"model.layers.0.self_attn.k_norm.weight\" is a q/k norm the job's "
                         "model has not");
  fs::remove_all(dir);
}

TEST_CASE("hf: an MoE llama is a Mixtral export and an aux_free job starts from one",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_mixtral_names");
  JobSpec spec = mixtral_spec(dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  SafetensorsFile f((out / "model.safetensors").string());
  CHECK(f.tensor("model.layers.1.block_sparse_moe.gate.weight").shape == std::vector<int64_t>{4, 32});
  CHECK(f.tensor("model.layers.0.block_sparse_moe.experts.3.w1.weight").shape ==
        std::vector<int64_t>{24, 32});
  CHECK(f.tensor("model.layers.0.block_sparse_moe.experts.3.w2.weight").shape ==
        std::vector<int64_t>{32, 24});
  CHECK(f.tensors().size() == 1 + 1 + 1 + 2 * (2 + 4 + 1 + 4 * 3));
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("architectures").items()[0].as_string() == "MixtralForCausalLM");
  // DeepSeek-V3's aux_free balancing keeps a per-expert bias Mixtral has none
  // of: started from Mixtral it is zero, as in a fresh job, and the rest loads.
  JobSpec free = spec;
  free.model.moe.balance = Balance::aux_free;
  Trainer b(free, quiet_options());
  load_hf_weights(out.string(), model_config(free), b.model().buffers(), b.context());
  auto pa = params_of(a), pb = params_of(b);
  for (const auto& [name, v] : pb) {
    INFO(name);
    if (name.find("e_score_correction_bias") != std::string::npos)
      CHECK(v == std::vector<float>(4, 0.0f));
    else
      CHECK(v == pa.at(name));
  }
  // A job with fewer layers or experts than the checkpoint is refused by name.
  JobSpec fewer = spec;
  fewer.model.moe.n_experts = 2;
  Trainer c(fewer, quiet_options());
  CHECK_THROWS_WITH(load_hf_weights(out.string(), model_config(fewer), c.model().buffers(), c.context()),
                    Catch::Matchers::Contains("num_local_experts is 4, but model.moe.n_experts is 2"));
  fs::remove(out / "config.json");  // without config.json the tensor names still tell
  CHECK_THROWS_WITH(load_hf_weights(out.string(), model_config(fewer), c.model().buffers(), c.context()),
                    Catch::Matchers::Contains("is of expert 2, but model.moe.n_experts is 2"));
  fs::remove_all(dir);
}

TEST_CASE("hf: an MLA llama is a DeepSeek-V3 export: its names, interleaved RoPE rows and expert bias",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_deepseek_v3");
  JobSpec spec = deepseek_spec(dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  SafetensorsFile f((out / "model.safetensors").string());
  const std::string l0 = "model.layers.0.", l1 = "model.layers.1.";
  CHECK(f.tensor(l0 + "self_attn.q_a_proj.weight").shape == std::vector<int64_t>{24, 32});
  CHECK(f.tensor(l0 + "self_attn.q_a_layernorm.weight").shape == std::vector<int64_t>{24});
  CHECK(f.tensor(l0 + "self_attn.q_b_proj.weight").shape == std::vector<int64_t>{4 * 12, 24});
  CHECK(f.tensor(l0 + "self_attn.kv_a_proj_with_mqa.weight").shape == std::vector<int64_t>{16 + 4, 32});
  CHECK(f.tensor(l0 + "self_attn.kv_b_proj.weight").shape == std::vector<int64_t>{4 * (8 + 6), 16});
  CHECK(f.tensor(l0 + "self_attn.o_proj.weight").shape == std::vector<int64_t>{32, 4 * 6});
  CHECK(f.tensor(l0 + "mlp.gate_proj.weight").shape == std::vector<int64_t>{64, 32});
  CHECK(f.tensor(l1 + "mlp.gate.weight").shape == std::vector<int64_t>{8, 32});
  CHECK(f.tensor(l1 + "mlp.gate.e_score_correction_bias").shape == std::vector<int64_t>{8});
  CHECK(f.tensor(l1 + "mlp.experts.7.gate_proj.weight").shape == std::vector<int64_t>{12, 32});
  CHECK(f.tensor(l1 + "mlp.experts.7.down_proj.weight").shape == std::vector<int64_t>{32, 12});
  CHECK(f.tensor(l1 + "mlp.shared_experts.up_proj.weight").shape == std::vector<int64_t>{12, 32});
  for (const auto& [name, view] : f.tensors()) {
    INFO(name);
    CHECK(name.find("block_sparse_moe") == std::string::npos);
  }
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("architectures").items()[0].as_string() == "DeepseekV3ForCausalLM");
  CHECK(cfg.at("rope_interleave").as_bool());
  CHECK(cfg.at("head_dim").as_int() == 4);
  CHECK(cfg.at("first_k_dense_replace").as_int() == 1);
  // Each RoPE part's pair j is rows (j, 2 + j) here, rows (2j, 2j + 1) there;
  // the other rows as they are.
  auto pa = params_of(a);
  const std::vector<float>& q_b = pa.at(l0 + "self_attn.q_b_proj.weight");
  const std::vector<float> hf_q_b = f.read_f32(l0 + "self_attn.q_b_proj.weight");
  auto row = [](const std::vector<float>& t, int64_t r) { return std::vector<float>(t.begin() + r * 24, t.begin() + (r + 1) * 24); };
  for (int64_t h = 0; h < 4; ++h) {
    const int64_t base = h * 12;
    for (int64_t r = 0; r < 8; ++r) CHECK(row(hf_q_b, base + r) == row(q_b, base + r));
    for (int64_t j = 0; j < 2; ++j) {
      CHECK(row(hf_q_b, base + 8 + 2 * j) == row(q_b, base + 8 + j));
      CHECK(row(hf_q_b, base + 8 + 2 * j + 1) == row(q_b, base + 8 + 2 + j));
    }
  }
  // The aux_free bias moved in training and is exported as it is.
  const std::vector<float> bias = f.read_f32(l1 + "mlp.gate.e_score_correction_bias");
  CHECK(bias == pa.at(l1 + "block_sparse_moe.gate.e_score_correction_bias"));
  CHECK(std::any_of(bias.begin(), bias.end(), [](float x) { return x != 0.0f; }));
  // rope_interleave: false says the rows are halves already: read so, the
  // model is another one.
  Json halves = cfg;
  halves.set("rope_interleave", Json(false));
  replace_file_atomically((out / "config.json").string(), halves.dump(2));
  Trainer b(spec, quiet_options());
  load_hf_weights(out.string(), model_config(spec), b.model().buffers(), b.context());
  CHECK(params_of(b).at(l0 + "self_attn.q_b_proj.weight") != q_b);
  CHECK(forward(a, 200).second != forward(b, 200).second);
  replace_file_atomically((out / "config.json").string(), cfg.dump(2));
  // A job without aux_free has no bias to read: a nonzero one is refused.
  JobSpec aux = spec;
  aux.model.moe.balance = Balance::aux_loss;
  Trainer c(aux, quiet_options());
  CHECK_THROWS_WITH(load_hf_weights(out.string(), model_config(aux), c.model().buffers(), c.context()),
                    Catch::Matchers::Contains("tensor \"model.layers.1.mlp.gate.e_score_correction_bias\" is a "
                                              "nonzero expert-choice bias the job's model has not"));
  // A plain llama job is told what the file is.
  JobSpec llama = tiny_spec(Family::llama, dir);
  Trainer d(llama, quiet_options());
  CHECK_THROWS_WITH(load_hf_weights(out.string(), model_config(llama), d.model().buffers(), d.context()),
                    Catch::Matchers::Contains("model_type is \"deepseek_v3\", but the job's model is llama"));
  fs::remove_all(dir);
}

TEST_CASE("hf: an MoE llama with q/k norms is a Qwen3-MoE export in Qwen3-MoE's names",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_qwen3_moe_names");
  JobSpec spec = qwen3_moe_spec(dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  SafetensorsFile f((out / "model.safetensors").string());
  CHECK(f.tensor("model.layers.0.mlp.gate_proj.weight").shape == std::vector<int64_t>{spec.model.d_ff, 32});
  CHECK(f.tensor("model.layers.1.mlp.gate.weight").shape == std::vector<int64_t>{4, 32});
  CHECK(f.tensor("model.layers.1.mlp.experts.3.gate_proj.weight").shape == std::vector<int64_t>{24, 32});
  CHECK(f.tensor("model.layers.1.mlp.experts.3.up_proj.weight").shape == std::vector<int64_t>{24, 32});
  CHECK(f.tensor("model.layers.1.mlp.experts.3.down_proj.weight").shape == std::vector<int64_t>{32, 24});
  for (const auto& [name, view] : f.tensors()) {
    INFO(name);
    CHECK(name.find("block_sparse_moe") == std::string::npos);
  }
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("architectures").items()[0].as_string() == "Qwen3MoeForCausalLM");
  CHECK(cfg.at("decoder_sparse_step").as_int() == 2);
  // The same job with Mixtral's routing (renormalised) reads the file but not its config.json.
  JobSpec renormalised = spec;
  renormalised.model.moe.normalize_topk = true;
  Trainer b(renormalised, quiet_options());
  CHECK_THROWS_WITH(load_hf_weights(out.string(), model_config(renormalised), b.model().buffers(), b.context()),
                    Catch::Matchers::Contains("norm_topk_prob is false, but model.moe.normalize_topk is true"));
  // A Mixtral-style job (no q/k norms) is told what the file is.
  JobSpec mixtral = mixtral_spec(dir);
  mixtral.model.moe.every = 2;
  Trainer c(mixtral, quiet_options());
  auto load = [&] { load_hf_weights(out.string(), model_config(mixtral), c.model().buffers(), c.context()); };
  CHECK_THROWS_WITH(load(), Catch::Matchers::Contains("Qwen3-MoE is model.family llama with model.moe and "
                                                      "model.qk_norm: true"));
  fs::remove(out / "config.json");
  CHECK_THROWS_WITH(load(), Catch::Matchers::Contains("is a q/k norm the job's model has not"));
  fs::remove_all(dir);
}

TEST_CASE("hf: a windowed llama is a Mistral export in Llama's names, refused by a job of another window",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_mistral");
  JobSpec spec = mistral_spec(dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  SafetensorsFile f((out / "model.safetensors").string());
  CHECK(f.tensor("model.layers.1.self_attn.k_proj.weight").shape == std::vector<int64_t>{16, 32});
  CHECK(f.tensor("model.layers.1.mlp.gate_proj.weight").shape == std::vector<int64_t>{64, 32});
  CHECK(f.tensor("lm_head.weight").shape == std::vector<int64_t>{200, 32});
  const fs::path config = out / "config.json";
  Json cfg = parse_json(read_text_file(config.string()), "config.json");
  CHECK(cfg.at("architectures").items()[0].as_string() == "MistralForCausalLM");
  CHECK(cfg.at("model_type").as_string() == "mistral");
  CHECK(cfg.at("sliding_window").as_int() == 4);
  auto pa = params_of(a);
  auto load = [&](const JobSpec& job) {
    Trainer t(job, quiet_options());
    load_hf_weights(out.string(), model_config(job), t.model().buffers(), t.context());
    return params_of(t);
  };
  // A job without the window, or with another, is refused by the key.
  JobSpec plain = tiny_spec(Family::llama, dir);
  CHECK_THROWS_WITH(load(plain), Catch::Matchers::Contains("sliding_window is 4, below model.max_seq_len 16, but "
                                                           "model.sliding_window is null (full causal attention)"));
  JobSpec wider = mistral_spec(dir);
  wider.model.sliding_window = 6;
  CHECK_THROWS_WITH(load(wider), Catch::Matchers::Contains("sliding_window is 4, but model.sliding_window is 6"));
  // Mistral 7B v0.2 and later: sliding_window null, a Llama a window-less job takes.
  cfg.set("sliding_window", Json());
  replace_file_atomically(config.string(), cfg.dump(2));
  CHECK(load(plain) == pa);
  CHECK_THROWS_WITH(load(spec), Catch::Matchers::Contains("sliding_window is null (full causal attention), but "
                                                          "model.sliding_window is 4"));
  // A windowed job started from a Llama export is told that LlamaForCausalLM has no window.
  fs::path llama_dir = fresh_temp_dir("hf_mistral_from_llama");
  const fs::path llama_out = plain_llama_export(llama_dir, false);
  Trainer c(spec, quiet_options());
  CHECK_THROWS_WITH(load_hf_weights(llama_out.string(), model_config(spec), c.model().buffers(), c.context()),
                    Catch::Matchers::Contains("model_type is \"llama\", but the job's model is mistral "
                                              "(model.family llama with model.sliding_window): LlamaForCausalLM "
                                              "has no sliding window, but model.sliding_window is 4"));
  fs::remove_all(dir);
  fs::remove_all(llama_dir);
}

TEST_CASE("hf: a windowed Qwen2 exports use_sliding_window in every layer, which a window-less job refuses",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_qwen2_window");
  JobSpec spec = qwen2_window_spec(dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("architectures").items()[0].as_string() == "Qwen2ForCausalLM");
  CHECK(cfg.at("use_sliding_window").as_bool());
  CHECK(cfg.at("sliding_window").as_int() == 4);
  CHECK(cfg.at("max_window_layers").as_int() == 0);
  CHECK(cfg.at("layer_types").items().size() == 2);
  JobSpec plain = qwen2_spec(dir);
  Trainer b(plain, quiet_options());
  CHECK_THROWS_WITH(load_hf_weights(out.string(), model_config(plain), b.model().buffers(), b.context()),
                    Catch::Matchers::Contains("use_sliding_window is true with sliding_window 4, below "
                                              "model.max_seq_len 16, in layers 0, 1 (layer_types), but "
                                              "model.sliding_window is null (full causal attention)"));
  fs::remove_all(dir);
}

TEST_CASE("hf: a GPT-2 with a sliding window is refused by export and by import, naming the key",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_gpt2_window");
  JobSpec spec = tiny_spec(Family::gpt2, dir);
  spec.model.sliding_window = 4;
  Trainer a(spec, quiet_options());
  auto world = parallel::make_single_communicator("world");
  Checkpointer(spec, *world, Device::cpu, {}, nullptr).save(1, a.model().buffers(), a.optimizer());
  CHECK_THROWS_AS(export_hf(dir.string(), (dir / "hf").string(), nullptr), InputError);
  CHECK_THROWS_WITH(export_hf(dir.string(), (dir / "hf").string(), nullptr),
                    Catch::Matchers::Contains("model.sliding_window is 4: no Hugging Face class computes GPT-2 "
                                              "blocks with a sliding window"));
  CHECK(!fs::exists(dir / "hf"));  // refused before anything is written
  // The window-less GPT-2's export, started from by the windowed job.
  fs::path plain_dir = fresh_temp_dir("hf_gpt2_window_plain");
  JobSpec plain = tiny_spec(Family::gpt2, plain_dir);
  Trainer p(plain, quiet_options());
  fs::path out = trained_export(plain_dir, p, plain);
  for (bool with_config : {true, false}) {
    INFO("config.json " << with_config);
    if (!with_config) fs::remove(out / "config.json");
    CHECK_THROWS_WITH(load_hf_weights(out.string(), model_config(spec), a.model().buffers(), a.context()),
                      Catch::Matchers::Contains("model.sliding_window is 4: no Hugging Face class computes "
                                                "GPT-2 blocks"));
  }
  fs::remove_all(dir);
  fs::remove_all(plain_dir);
}

TEST_CASE("hf: the tokenizer exported with the model encodes as the one given", "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_tokenizer");
  JobSpec spec = tiny_spec(Family::gpt2, dir);
  spec.model.vocab_size = 320;  // the tiny vocabularies' ids (up to 301) fit
  Trainer a(spec, quiet_options());
  testing::train_losses(a, 1, 1);
  auto world = parallel::make_single_communicator("world");
  Checkpointer(spec, *world, Device::cpu, {}, nullptr).save(1, a.model().buffers(), a.optimizer());
  const std::string fx = std::string(TRAINER_SOURCE_DIR) + "/test/data/fixtures/";
  // The vocabulary without merges.txt's "#version" line, as a user's file may be.
  fs::create_directories(dir / "tok");
  std::string merges = read_text_file(fx + "tiny_merges.txt");
  merges = merges.substr(merges.find('\n') + 1);
  merges.pop_back();  // and without its final newline
  write_file_durably((dir / "tok/merges.txt").string(), merges);
  fs::path out = dir / "hf";
  HfExportOptions with_tokenizer;
  with_tokenizer.vocab = fx + "tiny_vocab.json";
  with_tokenizer.merges = (dir / "tok/merges.txt").string();
  export_hf(dir.string(), out.string(), nullptr, with_tokenizer);
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"})
    CHECK(fs::exists(out / f));
  // GPT2Tokenizer skips merges.txt's first line and what follows its last newline.
  std::string written = read_text_file((out / "merges.txt").string());
  CHECK(written.rfind("#version: 0.2\n", 0) == 0);
  CHECK(written.back() == '\n');
  auto given = data::Tokenizer::from_text(read_text_file(fx + "tiny_vocab.json"),
                                          read_text_file(fx + "tiny_merges.txt"), "v", "m");
  auto exported = data::Tokenizer::load((out / "vocab.json").string(), (out / "merges.txt").string());
  const std::string text = "hello world aaaa aba the world";
  CHECK(exported.encode(text) == given.encode(text));
  CHECK(exported.num_merges() == given.num_merges());
  Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
  CHECK(cfg.at("eos_token_id").as_int() == given.eot_id());
  CHECK(cfg.at("bos_token_id").as_int() == given.eot_id());
  Json tc = parse_json(read_text_file((out / "tokenizer_config.json").string()), "tokenizer_config.json");
  CHECK(tc.at("tokenizer_class").as_string() == "GPT2Tokenizer");
  CHECK(tc.at("eos_token").as_string() == "<|endoftext|>");
  CHECK(tc.at("model_max_length").as_int() == spec.model.max_seq_len);
  CHECK(!tc.at("clean_up_tokenization_spaces").as_bool());

  // A tokenizer.json (Llama 3's kind): copied as it is, for PreTrainedTokenizerFast.
  const std::string tj = fx + "tiny_llama3_tokenizer.json";
  fs::path fast = dir / "hf_fast";
  HfExportOptions with_json;
  with_json.tokenizer = tj;
  export_hf(dir.string(), fast.string(), nullptr, with_json);
  CHECK(read_text_file((fast / "tokenizer.json").string()) == read_text_file(tj));
  CHECK(!fs::exists(fast / "vocab.json"));
  Json fc = parse_json(read_text_file((fast / "tokenizer_config.json").string()), "tokenizer_config.json");
  CHECK(fc.at("tokenizer_class").as_string() == "PreTrainedTokenizerFast");
  CHECK(fc.at("bos_token").as_string() == "<|begin_of_text|>");
  CHECK(fc.at("eos_token").as_string() == "<|end_of_text|>");
  Json fcfg = parse_json(read_text_file((fast / "config.json").string()), "config.json");
  CHECK(fcfg.at("bos_token_id").as_int() == 300);
  CHECK(fcfg.at("eos_token_id").as_int() == 301);
  with_json.vocab = fx + "tiny_vocab.json";
  with_json.merges = fx + "tiny_merges.txt";
  CHECK_THROWS_WITH(export_hf(dir.string(), (dir / "hf_both").string(), nullptr, with_json),
                    Catch::Matchers::Contains("--tokenizer: give it or --vocab and --merges, not both"));

  // A vocabulary beyond the model's ids is refused before anything is written.
  JobSpec small = tiny_spec(Family::gpt2, dir / "small");
  Trainer b(small, quiet_options());
  Checkpointer(small, *world, Device::cpu, {}, nullptr).save(1, b.model().buffers(), b.optimizer());
  HfExportOptions too_big;
  too_big.vocab = fx + "tiny_vocab.json";
  too_big.merges = fx + "tiny_merges.txt";
  CHECK_THROWS_WITH(export_hf((dir / "small").string(), (dir / "hf_small").string(), nullptr, too_big),
                    Catch::Matchers::Contains("ids up to 272, beyond model.vocab_size 200"));
  too_big.merges.clear();
  CHECK_THROWS_WITH(export_hf((dir / "small").string(), (dir / "hf_small").string(), nullptr, too_big),
                    Catch::Matchers::Contains("give both"));
  CHECK(!fs::exists(dir / "hf_small"));
  fs::remove_all(dir);
}

TEST_CASE("hf: bf16/fp16 exports sharded as save_pretrained load back rounded and replace old files",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_sharded");
  JobSpec spec = tiny_spec(Family::llama, dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);  // fp32, one file
  REQUIRE(fs::exists(out / "model.safetensors"));
  auto pa = params_of(a);
  for (const char* dtype : {"bf16", "fp16"}) {
    INFO(dtype);
    const bool bf16 = dtype[0] == 'b';
    HfExportOptions o;
    o.dtype = dtype;
    o.max_shard_bytes = 8000;  // the 200 x 32 tables (12.8 kB) get a shard each
    export_hf(dir.string(), out.string(), nullptr, o);
    CHECK(!fs::exists(out / "model.safetensors"));  // the earlier export's file
    Json index = parse_json(read_text_file((out / "model.safetensors.index.json").string()), "index");
    std::set<std::string> files;
    uint64_t total = 0;
    for (const auto& [name, file] : index.at("weight_map").members()) files.insert(file.as_string());
    REQUIRE(files.size() > 2);
    for (size_t i = 0; i < files.size(); ++i) {
      std::string f = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, files.size());
      REQUIRE(files.count(f));
      SafetensorsFile sf((out / f).string());
      uint64_t bytes = 0;
      for (const auto& [name, view] : sf.tensors()) {
        CHECK(view.dtype == (bf16 ? "BF16" : "F16"));
        CHECK(index.at("weight_map").at(name).as_string() == f);
        bytes += view.bytes;
      }
      CHECK((bytes <= o.max_shard_bytes || sf.tensors().size() == 1));
      total += bytes;
    }
    CHECK(index.at("metadata").at("total_size").as_int() == static_cast<int64_t>(total));
    Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
    CHECK(cfg.at("torch_dtype").as_string() == (bf16 ? "bfloat16" : "float16"));
    Trainer b(spec, quiet_options());
    load_hf_weights(out.string(), model_config(spec), b.model().buffers(), b.context());
    for (const auto& [name, v] : params_of(b)) {
      INFO(name);
      std::vector<float> want = pa.at(name);
      const int64_t valid = name.find("embed_tokens") != std::string::npos ||
                                    name.find("lm_head") != std::string::npos
                                ? int64_t{spec.model.vocab_size} * spec.model.d_model
                                : static_cast<int64_t>(want.size());  // padding rows load as zeros
      for (size_t j = 0; j < want.size(); ++j)
        want[j] = int64_t(j) >= valid ? 0.0f : bf16 ? round_to_bf16(want[j]) : round_to_f16(want[j]);
      CHECK(v == want);
    }
  }
  export_hf(dir.string(), out.string(), nullptr);  // fp32 again: one file, no index, no shards
  int model_files = 0;
  for (const auto& e : fs::directory_iterator(out))
    model_files += e.path().filename().string().rfind("model", 0) == 0;
  CHECK(model_files == 1);
  CHECK(fs::exists(out / "model.safetensors"));
  fs::remove_all(dir);
}

TEST_CASE("hf: fp8 exports write the layers' projections in fp8 blocks with their scales, the rest "
          "bf16, and load back within fp8's rounding", "[cpu][checkpoint]") {
  for (const std::string name : {"qwen2", "deepseek_v3"}) {
    INFO(name);
    const JobSpec spec = hf_job("hf_fp8", name);
    fs::path dir = spec.run.dir;
    Trainer a(spec, quiet_options());
    fs::path out = trained_export(dir, a, spec);
    HfExportOptions o;
    o.dtype = "fp8";
    o.fp8_block_rows = 16, o.fp8_block_cols = 8;  // not square: a transposed grid would show
    export_hf(dir.string(), out.string(), nullptr, o);
    Json cfg = parse_json(read_text_file((out / "config.json").string()), "config.json");
    CHECK(cfg.at("torch_dtype").as_string() == "bfloat16");
    const Json& q = cfg.at("quantization_config");
    CHECK(q.at("quant_method").as_string() == "fp8");
    CHECK(q.at("fmt").as_string() == "e4m3");
    CHECK(q.at("activation_scheme").as_string() == "dynamic");
    CHECK(q.at("weight_block_size").items()[0].as_int() == 16);
    CHECK(q.at("weight_block_size").items()[1].as_int() == 8);
    CHECK((q.find("modules_to_not_convert") != nullptr) == (name == "qwen2"));  // DeepSeek's hub has none
    SafetensorsFile f((out / "model.safetensors").string());
    int quantized = 0;
    std::map<std::string, float> block_max;  // per quantized tensor: its largest |w|
    for (const auto& [n, view] : f.tensors()) {
      INFO(n);
      const bool layer_weight = n.rfind("model.layers.", 0) == 0 && view.shape.size() == 2 &&
                                ends_with(n, ".weight");
      const bool router = n.find(".mlp.gate.weight") != std::string::npos;
      if (ends_with(n, "_scale_inv")) {
        const auto& w = f.tensor(n.substr(0, n.size() - 10)).shape;
        CHECK(view.dtype == "F32");
        CHECK(view.shape == std::vector<int64_t>{(w[0] + 15) / 16, (w[1] + 7) / 8});
      } else if (layer_weight && !router) {
        CHECK(view.dtype == "F8_E4M3");
        CHECK(f.has(n + "_scale_inv"));
        ++quantized;
      } else {
        CHECK(view.dtype == "BF16");  // norms, biases, embeddings, lm_head, DeepSeek's router
      }
    }
    CHECK(quantized >= 7 * spec.model.n_layer);
    {
      // Sharded small, a weight's codes and scales fall in different files: the same bytes.
      HfExportOptions small = o;
      small.max_shard_bytes = 1500;
      const fs::path sharded = dir / "hf_fp8_sharded";
      export_hf(dir.string(), sharded.string(), nullptr, small);
      Json index = parse_json(read_text_file((sharded / "model.safetensors.index.json").string()), "index");
      int split = 0;
      for (const auto& [n, view] : f.tensors()) {
        INFO(n);
        const std::string file = index.at("weight_map").at(n).as_string();
        SafetensorsFile part((sharded / file).string());
        const checkpoint::TensorView& v = part.tensor(n);
        CHECK(std::vector<uint8_t>(v.data, v.data + v.bytes) == std::vector<uint8_t>(view.data, view.data + view.bytes));
        if (ends_with(n, "_scale_inv"))
          split += index.at("weight_map").at(n.substr(0, n.size() - 10)).as_string() != file;
      }
      CHECK(split > 0);
    }
    // Back in: each quantized weight within fp8's rounding of its block (at most 1/16 of the
    // block's largest |w|, and exactly the block's largest itself), the rest bf16-rounded.
    Trainer b(spec, quiet_options());
    load_hf_weights(out.string(), model_config(spec), b.model().buffers(), b.context());
    const auto pa = params_of(a), pb = params_of(b);
    const model::ModelConfig mc = model_config(spec);
    for (const auto& [n, want] : pa) {
      INFO(n);
      const std::vector<float>& got = pb.at(n);
      const std::string hf = hf_tensor_name(mc, n);
      if (!f.has(hf) || f.tensor(hf).dtype != "F8_E4M3") {
        const bool table = n.find("embed_tokens") != std::string::npos || n.find("lm_head") != std::string::npos;
        const size_t valid = table ? size_t(spec.model.vocab_size) * spec.model.d_model : want.size();
        for (size_t j = 0; j < want.size(); ++j)  // padding rows load as zeros
          CHECK(got[j] == (j >= valid ? 0.0f : round_to_bf16(want[j])));
        continue;
      }
      // The imported weight in our layout (DeepSeek's RoPE rows reordered back): compare
      // per element against the block bound of the exported tensor's scales.
      const std::vector<float> scales = f.read_f32(hf + "_scale_inv");
      const float largest = *std::max_element(scales.begin(), scales.end()) * 448.0f;
      double worst = 0;
      for (size_t j = 0; j < want.size(); ++j) worst = std::max(worst, double(std::fabs(got[j] - want[j])));
      CHECK(worst <= largest / 16.0f * 1.0001f);
      CHECK(worst > 0);  // fp8 rounded something
    }
    // The logits move by fp8's rounding only.
    auto [la, xa] = forward(a, spec.model.vocab_size);
    auto [lb, xb] = forward(b, spec.model.vocab_size);
    double loss_a = 0, loss_b = 0;
    for (size_t j = 0; j < la.size(); ++j) loss_a += la[j], loss_b += lb[j];
    CHECK(std::fabs(loss_b - loss_a) <= 0.05 * std::fabs(loss_a));
    fs::remove_all(dir);
  }
  // GPT-2 (Conv1D) and the MoE classes with nn.Linear routers are refused before anything is written.
  for (const std::string name : {"gpt2", "mixtral"}) {
    INFO(name);
    const JobSpec spec = hf_job("hf_fp8_refused", name);
    fs::path dir = spec.run.dir;
    Trainer a(spec, quiet_options());
    trained_export(dir, a, spec);
    HfExportOptions o;
    o.dtype = "fp8";
    CHECK_THROWS_WITH(export_hf(dir.string(), (dir / "fp8").string(), nullptr, o),
                      Catch::Matchers::Contains("--dtype fp8: writes fine-grained fp8 for LlamaForCausalLM"));
    CHECK(!fs::exists(dir / "fp8"));
    fs::remove_all(dir);
  }
}

TEST_CASE("hf: bf16 weights without the transformer. prefix, sharded by an index",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("hf_bf16");
  JobSpec spec = tiny_spec(Family::gpt2, dir);
  Trainer a(spec, quiet_options());
  fs::path out = trained_export(dir, a, spec);
  // Re-encode the export as two bf16 shards named like GPT2Model ("h.0..."), with an index.
  SafetensorsFile src((out / "model.safetensors").string());
  fs::path sharded = dir / "sharded";
  fs::create_directories(sharded);
  std::vector<std::vector<uint16_t>> keep;
  SafetensorsWriter w1, w2;
  Json map = Json::object();
  int i = 0;
  for (const auto& [name, view] : src.tensors()) {
    std::vector<float> v = src.read_f32(name);
    std::vector<uint16_t> h(v.size());
    for (size_t j = 0; j < v.size(); ++j) {
      uint32_t bits;
      std::memcpy(&bits, &v[j], 4);
      h[j] = static_cast<uint16_t>(bits >> 16);  // truncation: an exact bf16 value
    }
    keep.push_back(std::move(h));
    std::string short_name = name.substr(std::string("transformer.").size());
    bool first = i++ % 2 == 0;
    (first ? w1 : w2).add(short_name, "BF16", view.shape, keep.back().data(), keep.back().size() * 2);
    map.set(short_name, Json(first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors"));
  }
  w1.write((sharded / "model-00001-of-00002.safetensors").string());
  w2.write((sharded / "model-00002-of-00002.safetensors").string());
  Json index = Json::object();
  index.set("metadata", Json::object());
  index.set("weight_map", std::move(map));
  write_file_durably((sharded / "model.safetensors.index.json").string(), index.dump(2));

  Trainer b(spec, quiet_options());
  load_hf_weights(sharded.string(), model_config(spec), b.model().buffers(), b.context());
  auto pa = params_of(a), pb = params_of(b);
  for (auto& [name, v] : pa) {
    INFO(name);
    std::vector<float> expect(v.size());
    for (size_t j = 0; j < v.size(); ++j) {
      uint32_t bits;
      std::memcpy(&bits, &v[j], 4);
      bits &= 0xFFFF0000u;
      std::memcpy(&expect[j], &bits, 4);
    }
    CHECK(pb[name] == expect);
  }
  // A missing tensor is named with its file.
  fs::remove(sharded / "model-00002-of-00002.safetensors");
  Trainer c(spec, quiet_options());
  CHECK_THROWS_AS(load_hf_weights(sharded.string(), model_config(spec), c.model().buffers(),
                                  c.context()),
                  InputError);
  fs::remove_all(dir);
}

TEST_CASE("hf: reference logits written with an export are the trained model's logits",
          "[cpu][checkpoint]") {
  for (const auto& [name, spec] : hf_jobs("hf_ref")) {
    INFO(name);
    fs::path dir = spec.run.dir;
    Trainer a(spec, quiet_options());
    fs::path out = trained_export(dir, a, spec);
    const std::string step_dir = resolve_checkpoint(dir.string(), nullptr);
    write_hf_reference(step_dir, out.string(), 1000, nullptr);  // clamped to max_seq_len 16

    Json ref = parse_json(read_text_file((out / "reference.json").string()), "reference.json");
    const int64_t V = spec.model.vocab_size, T = spec.model.max_seq_len;
    REQUIRE(ref.at("vocab_size").as_int() == V);
    REQUIRE(ref.at("ids").items().size() == static_cast<size_t>(T));
    std::string bytes = read_text_file((out / "reference_logits.f32").string());
    REQUIRE(bytes.size() == size_t(T * V) * sizeof(float));
    std::vector<float> file(static_cast<size_t>(T * V));
    std::memcpy(file.data(), bytes.data(), bytes.size());

    // The trained model itself (not the export) on the same ids in every row.
    model::Model& m = a.model();
    const int64_t rows = m.input_ids().numel() / T;
    std::vector<int32_t> ids(static_cast<size_t>(rows * T));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < T; ++t)
        ids[r * T + t] = static_cast<int32_t>(ref.at("ids").items()[static_cast<size_t>(t)].as_int());
    copy_from_host(m.input_ids(), ids.data());
    copy_from_host(m.targets(), ids.data());
    m.forward(a.context());
    std::vector<float> logits = host_logits(a);
    const int64_t Vpad = static_cast<int64_t>(logits.size()) / (rows * T);
    double worst = 0, largest = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < V; ++v) {
        worst = std::max(worst, double(std::abs(file[t * V + v] - logits[t * Vpad + v])));
        largest = std::max(largest, double(std::abs(logits[t * Vpad + v])));
      }
    // Same ops on the same weights on one CPU rank, but the reference runs one
    // sequence and this model `rows`: OpenBLAS may round an element by the
    // GEMM's row count (its Haswell kernels do, by an ulp: 9e-8 here), so
    // equal up to float rounding, far below what a wrong weight moves.
    INFO("worst " << worst << " of largest " << largest);
    CHECK(worst <= 1e-6 * std::max(1.0, largest));
    fs::remove_all(dir);
  }
}
