// model.init_from against an independent implementation of transformers:
// hf_fixtures/ holds tiny GPT2LMHeadModel, LlamaForCausalLM (plain RoPE and
// Llama 3.1 rope_scaling, and YaRN), Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM,
// Qwen3MoeForCausalLM, Qwen2MoeForCausalLM and MistralForCausalLM (a sliding window of 4 keys
// over 16 tokens) checkpoints, and DeepseekV3ForCausalLM ones (plain, under DeepSeek's YaRN,
// and in fine-grained fp8 blocks with their scales),
// and the logits their transformers forward
// computes (make_hf_fixtures.js, written from transformers' modeling code
// without reading this trainer's). Loading each and running this trainer's
// forward must give those logits: the Conv1D and fused c_attn layouts,
// rotate-half RoPE and Llama 3.1's and YaRN's scalings of it, GQA grouping, Qwen2's q/k/v
// biases before RoPE, Qwen3's per-head q/k norms before RoPE, gelu_new,
// norm epsilons, Mixtral's renormalised top-k routing and Qwen3-MoE's names, dense
// layers between MoE ones and un-renormalised routing, and Mistral's window (no
// window, or one key more or fewer) all show in them (the generator shows that each
// wrong reading moves them by over 1% of the largest logit).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_interop.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/json.h"
#include "engine/model_from_spec.h"
#include "engine/trainer.h"
#include "kernels/memory.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;

namespace {

const std::string kFixtures = std::string(TRAINER_SOURCE_DIR) + "/test/checkpoint/hf_fixtures/";

// The job whose model is the fixture's config.json (16-token sequences, one per micro-batch).
JobSpec fixture_job(const std::string& name) {
  const bool gpt2 = name == "gpt2";
  JobSpec s = testing::tiny_job(gpt2 ? Family::gpt2 : Family::llama, 1);
  s.model.vocab_size = 200;
  s.model.d_model = 32;
  s.model.n_layer = 2;
  s.model.n_head = 4;
  s.train.micro_batch = s.train.global_batch = 1;
  if (gpt2) {
    s.model.d_ff = 64;
    s.model.norm_eps = 1e-5;
  } else if (name == "mistral") {  // Llama with a sliding window of 4 keys in every layer
    s.model.n_kv_head = 2, s.model.d_ff = 48;
    s.model.norm_eps = 1e-5, s.model.rope_theta = 1e6;
    s.model.sliding_window = 4;
  } else if (name == "llama" || name == "llama3") {
    s.model.n_kv_head = 2, s.model.d_ff = 48;
    s.model.norm_eps = 1e-6, s.model.rope_theta = 500000.0;
    if (name == "llama3") {  // Llama 3.1's RoPE scaling
      s.model.rope_scaling.enabled = true;
      s.model.rope_scaling.factor = 8.0;
      s.model.rope_scaling.original_max_position_embeddings = 256;
    }
  } else if (name == "llama_yarn") {  // YaRN: factor 4 over 256 positions, theta 1e4
    s.model.n_kv_head = 2, s.model.d_ff = 48;
    s.model.norm_eps = 1e-6, s.model.rope_theta = 10000.0;
    s.model.rope_scaling.enabled = true;
    s.model.rope_scaling.type = RopeType::yarn;
    s.model.rope_scaling.factor = 4.0;
    s.model.rope_scaling.original_max_position_embeddings = 256;
  } else if (name == "qwen2") {  // Llama with q/k/v biases, tied embeddings
    s.model.n_kv_head = 2, s.model.d_ff = 48;
    s.model.norm_eps = 1e-6, s.model.rope_theta = 1e6;
    s.model.qkv_bias = s.model.tie_embeddings = true;
  } else if (name == "qwen3") {  // Llama with per-head q/k norms, heads of 16, tied embeddings
    s.model.n_kv_head = 2, s.model.d_ff = 48, s.model.head_size = 16;
    s.model.norm_eps = 1e-6, s.model.rope_theta = 1e6;
    s.model.qk_norm = s.model.tie_embeddings = true;
  } else if (name.rfind("deepseek_v3", 0) == 0) {  // MLA; layer 0 dense, layer 1 DeepSeek's MoE
    s.model.n_kv_head = 4, s.model.d_ff = 48;
    s.model.norm_eps = 1e-6, s.model.rope_theta = 1e4;
    s.model.mla = {.enabled = true, .q_lora_rank = 24, .kv_lora_rank = 16, .qk_nope_head_dim = 8,
                   .qk_rope_head_dim = 4, .v_head_dim = 6};
    MoESpec& m = s.model.moe;
    m.enabled = true, m.n_experts = 8, m.top_k = 2, m.d_ff_expert = 12, m.n_shared_experts = 1;
    m.first_dense = 1, m.balance = Balance::aux_free, m.score = RouterScore::sigmoid;
    m.topk_scaling_factor = 2.5, m.n_groups = 4, m.top_groups = 2;
    if (name == "deepseek_v3_yarn")  // DeepSeek's YaRN: x4 over 16 positions, mscale 1 and mscale_all_dim 0.6
      s.model.rope_scaling = {.enabled = true, .type = RopeType::yarn, .factor = 4,
                              .original_max_position_embeddings = 16, .attention_factor = std::nullopt, .mscale = 1.0, .mscale_all_dim = 0.6};
  } else if (name == "mixtral") {
    s.model.n_kv_head = 2;
    s.model.norm_eps = 1e-5, s.model.rope_theta = 1e6;
    s.model.moe.enabled = true;
    s.model.moe.n_experts = 4, s.model.moe.top_k = 2, s.model.moe.d_ff_expert = 24;
  } else if (name == "qwen2_moe") {  // Qwen2's attention; layer 0 dense (mlp_only_layers
                                     // [0]), layer 1 top-2 not renormalised + a gated shared expert
    s.model.n_kv_head = 2, s.model.d_ff = 48;
    s.model.norm_eps = 1e-6, s.model.rope_theta = 1e6;
    s.model.qkv_bias = true;
    s.model.moe.enabled = true;
    s.model.moe.n_experts = 4, s.model.moe.top_k = 2, s.model.moe.d_ff_expert = 24;
    s.model.moe.n_shared_experts = 2, s.model.moe.shared_expert_gate = true;
    s.model.moe.first_dense = 1, s.model.moe.normalize_topk = false;
  } else {  // qwen3_moe: Qwen3's attention, a dense layer 0, an MoE in layer 1 not renormalised
    s.model.n_kv_head = 2, s.model.d_ff = 48, s.model.head_size = 16;
    s.model.norm_eps = 1e-6, s.model.rope_theta = 1e6;
    s.model.qk_norm = true;
    s.model.moe.enabled = true;
    s.model.moe.n_experts = 4, s.model.moe.top_k = 2, s.model.moe.d_ff_expert = 24;
    s.model.moe.every = 2, s.model.moe.normalize_topk = false;
  }
  s.model.init_from = kFixtures + name;
  return s;
}

// Loads the HF checkpoint at `dir` into spec's model and runs the fixture's
// ids: the largest |logit - reference logit| and the largest |reference logit|.
std::pair<double, double> logits_against_reference(const JobSpec& spec, const std::string& dir,
                                                   const std::string& fixture) {
  Trainer t(spec, testing::quiet_options());
  model::Model& m = t.model();
  checkpoint::load_hf_weights(dir, model_config(spec), m.buffers(), t.context());

  Json ref = parse_json(checkpoint::read_text_file(fixture + "/reference.json"), "reference.json");
  const auto& ids_json = ref.at("ids").items();
  const int64_t T = static_cast<int64_t>(ids_json.size()), V = 200;
  REQUIRE(T == spec.train.seq_len);
  REQUIRE(ref.at("shape").items()[1].as_int() == V);
  std::vector<int32_t> ids;
  for (const Json& id : ids_json) ids.push_back(static_cast<int32_t>(id.as_int()));
  std::string bytes = checkpoint::read_text_file(fixture + "/reference_logits.f32");
  REQUIRE(bytes.size() == size_t(T * V) * sizeof(float));
  std::vector<float> want(static_cast<size_t>(T * V));
  std::memcpy(want.data(), bytes.data(), bytes.size());

  copy_from_host(m.input_ids(), ids.data());
  copy_from_host(m.targets(), ids.data());
  m.forward(t.context());
  Tensor x = m.logits(t.context());
  std::vector<float> got(static_cast<size_t>(x.numel()));
  copy_to_host(got.data(), x);
  const int64_t Vpad = x.size(1);
  double worst = 0, largest = 0;
  for (int64_t r = 0; r < T; ++r)
    for (int64_t v = 0; v < V; ++v) {
      worst = std::max(worst, double(std::fabs(got[r * Vpad + v] - want[r * V + v])));
      largest = std::max(largest, double(std::fabs(want[r * V + v])));
    }
  return {worst, largest};
}

}  // namespace

TEST_CASE("hf fixtures: init_from computes transformers' logits (gpt2, llama, llama3, llama_yarn, "
          "qwen2, qwen3, mixtral, qwen3_moe, qwen2_moe, mistral, deepseek_v3, deepseek_v3_yarn, "
          "deepseek_v3_fp8)", "[cpu][checkpoint]") {
  for (const std::string name : {"gpt2", "llama", "llama3", "llama_yarn", "qwen2", "qwen3", "mixtral",
                                 "qwen3_moe", "qwen2_moe", "mistral", "deepseek_v3", "deepseek_v3_yarn",
                                 "deepseek_v3_fp8"}) {
    INFO(name);
    const std::string dir = kFixtures + name;
    const auto [worst, largest] = logits_against_reference(fixture_job(name), dir, dir);
    // fp32 here against float64 there: rounding only, far below the 1% a
    // layout mistake makes.
    WARN(name << ": max |logit difference| " << worst << " of max |logit| " << largest);
    CHECK(worst <= 1e-5 * largest);
  }
}

TEST_CASE("hf fixtures: the mistral fixture's logits need the window (full causal attention misses "
          "them)", "[cpu][checkpoint]") {
  // The same weights in a job without model.sliding_window, config.json left
  // out (its check would refuse the job first): every other layout the same,
  // only the window is missing, and the logits move by far over 1%.
  namespace fs = std::filesystem;
  const std::string fixture = kFixtures + "mistral";
  const fs::path dir = testing::fresh_temp_dir("hf_fixture_mistral_unwindowed");
  fs::create_directories(dir);
  fs::copy_file(fixture + "/model.safetensors", dir / "model.safetensors");
  JobSpec spec = fixture_job("mistral");
  spec.model.sliding_window = 0;
  const auto [worst, largest] = logits_against_reference(spec, dir.string(), fixture);
  WARN("mistral without its window: max |logit difference| " << worst << " of max |logit| " << largest);
  CHECK(worst > 1e-2 * largest);
  // With its config.json, the fixture refuses that job by the key.
  Trainer t(spec, testing::quiet_options());
  CHECK_THROWS_WITH(checkpoint::load_hf_weights(fixture, model_config(spec), t.model().buffers(), t.context()),
                    Catch::Matchers::Contains("sliding_window is 4, below model.max_seq_len 16, but "
                                              "model.sliding_window is null (full causal attention)"));
  fs::remove_all(dir);
}

TEST_CASE("hf fixtures: the deepseek_v3 fixture needs its RoPE rows de-interleaved, and takes the "
          "multi-token-prediction layers its config.json names", "[cpu][checkpoint]") {
  namespace fs = std::filesystem;
  const std::string fixture = kFixtures + "deepseek_v3";
  const fs::path dir = testing::fresh_temp_dir("hf_fixture_deepseek_v3");
  fs::create_directories(dir);
  fs::copy_file(fixture + "/model.safetensors", dir / "model.safetensors");
  Json config = parse_json(checkpoint::read_text_file(fixture + "/config.json"), "config.json");
  const JobSpec spec = fixture_job("deepseek_v3");
  // rope_interleave: false reads the rows as rotate-half halves: every other
  // layout the same, the logits move by far over 1%.
  config.set("rope_interleave", Json(false));
  checkpoint::replace_file_atomically((dir / "config.json").string(), config.dump(2));
  const auto [worst, largest] = logits_against_reference(spec, dir.string(), fixture);
  WARN("deepseek_v3 with rope_interleave false: max |logit difference| " << worst << " of max |logit| "
       << largest);
  CHECK(worst > 1e-2 * largest);
  // The hub's DeepSeek-V3 holds model.layers.61 past its 61 layers: the
  // multi-token-prediction module (num_nextn_predict_layers), which
  // transformers skips too. Named in an index (never opened: not read).
  config.set("rope_interleave", Json(true));
  Json map = Json::object();
  const checkpoint::SafetensorsFile f((dir / "model.safetensors").string());
  for (const auto& [name, view] : f.tensors()) map.set(name, Json("model.safetensors"));
  map.set("model.layers.2.eh_proj.weight", Json("model-mtp.safetensors"));
  Json index = Json::object();
  index.set("weight_map", std::move(map));
  checkpoint::replace_file_atomically((dir / "model.safetensors.index.json").string(), index.dump(2));
  Trainer t(spec, testing::quiet_options());
  auto load = [&] {
    checkpoint::load_hf_weights(dir.string(), model_config(spec), t.model().buffers(), t.context());
  };
  checkpoint::replace_file_atomically((dir / "config.json").string(), config.dump(2));
  CHECK_THROWS_WITH(load(), Catch::Matchers::Contains("tensor \"model.layers.2.eh_proj.weight\" is of layer 2, "
                                                      "but model.n_layer is 2"));
  config.set("num_nextn_predict_layers", Json(int64_t{1}));
  checkpoint::replace_file_atomically((dir / "config.json").string(), config.dump(2));
  const auto [mtp_worst, mtp_largest] = logits_against_reference(spec, dir.string(), fixture);
  CHECK(mtp_worst <= 1e-5 * mtp_largest);
  fs::remove_all(dir);
}

TEST_CASE("hf fixtures: the deepseek_v3_fp8 fixture's fp8 blocks are read with their scales; a scale "
          "missing, misshapen or blocked otherwise and a NaN code are refused by name", "[cpu][checkpoint]") {
  namespace fs = std::filesystem;
  using Catch::Matchers::Contains;
  const std::string fixture = kFixtures + "deepseek_v3_fp8";
  const JobSpec spec = fixture_job("deepseek_v3_fp8");
  const fs::path dir = testing::fresh_temp_dir("hf_fixture_deepseek_v3_fp8");
  fs::create_directories(dir);
  const checkpoint::SafetensorsFile src(fixture + "/model.safetensors");
  const std::string qa = "model.layers.0.self_attn.q_a_proj.weight", qa_scale = qa + "_scale_inv";
  REQUIRE(src.tensor(qa).dtype == "F8_E4M3");
  REQUIRE(src.tensor(qa).shape == std::vector<int64_t>({24, 32}));
  REQUIRE(src.tensor(qa_scale).shape == std::vector<int64_t>({2, 4}));  // blocks of 16 x 8
  // The fixture's tensors into dir/model.safetensors, `edit` changing or (returning false) dropping one.
  std::vector<std::vector<uint8_t>> kept;
  auto rewrite = [&](const std::function<bool(const std::string&, checkpoint::TensorView&)>& edit) {
    checkpoint::SafetensorsWriter w;
    kept.clear();
    kept.reserve(src.tensors().size());
    for (const auto& [name, view] : src.tensors()) {
      checkpoint::TensorView v = view;
      kept.emplace_back(view.data, view.data + view.bytes);
      v.data = kept.back().data();
      if (!edit(name, v)) continue;
      w.add(name, v.dtype, v.shape, v.data, v.bytes);
    }
    fs::remove(dir / "model.safetensors");  // the writer makes a new file
    w.write((dir / "model.safetensors").string());
  };
  const std::string config_text = checkpoint::read_text_file(fixture + "/config.json");
  auto write_config = [&](const std::string& text) {
    checkpoint::replace_file_atomically((dir / "config.json").string(), text);
  };
  Trainer t(spec, testing::quiet_options());
  auto load = [&](const std::string& path) {
    checkpoint::load_hf_weights(path, model_config(spec), t.model().buffers(), t.context());
  };
  // Whole, the logits are the reference's (the test above); here, the refusals.
  write_config(config_text);
  rewrite([&](const std::string& name, checkpoint::TensorView&) { return name != qa_scale; });
  CHECK_THROWS_WITH(load(dir.string()),
                    Contains("tensor \"" + qa + "\" is F8_E4M3 but the checkpoint has no \"" + qa_scale + "\""));
  rewrite([&](const std::string& name, checkpoint::TensorView& v) {
    if (name == qa_scale) v.shape = {4, 2};
    return true;
  });
  CHECK_THROWS_WITH(load(dir.string()),
                    Contains("tensor \"" + qa_scale + "\" has shape [4, 2], expected [2, 4]: one scale per "
                             "block of \"" + qa + "\" [24, 32] in") &&
                        Contains("config.json's quantization_config.weight_block_size [16, 8]"));
  rewrite([&](const std::string& name, checkpoint::TensorView& v) {
    if (name == qa) const_cast<uint8_t*>(v.data)[1 * 32 + 5] = 0xFF;
    return true;
  });
  CHECK_THROWS_WITH(load(dir.string()),
                    Contains("tensor \"" + qa + "\" holds the fp8 NaN code 0xFF at [1, 5] (a corrupt weight)"));
  // Blocks of 8 x 16 in config.json: the scales' grid is not the file's.
  rewrite([](const std::string&, checkpoint::TensorView&) { return true; });
  Json config = parse_json(config_text, "config.json");
  Json q = Json::object();
  for (const auto& [k, v] : config.at("quantization_config").members()) q.set(k, v);
  q.set("weight_block_size", parse_json("[8, 16]", "blocks"));
  config.set("quantization_config", std::move(q));
  write_config(config.dump(2));
  CHECK_THROWS_WITH(load(dir.string()), Contains("has shape [2, 4], expected [3, 2]") &&
                                            Contains("weight_block_size [8, 16]"));
  // The file alone (no config.json): DeepSeek's default 128 x 128 blocks.
  CHECK_THROWS_WITH(load((dir / "model.safetensors").string()),
                    Contains("has shape [2, 4], expected [1, 1]") &&
                        Contains("the default 128 x 128 blocks (no config.json quantization_config)"));
  // Another quantization in config.json is named by its key.
  config.set("quantization_config", parse_json(R"({"quant_method": "awq", "bits": 4})", "q"));
  write_config(config.dump(2));
  CHECK_THROWS_WITH(load(dir.string()), Contains("quantization_config.quant_method is \"awq\""));
  fs::remove_all(dir);
}
