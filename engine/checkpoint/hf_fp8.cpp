// Fine-grained fp8 checkpoints in (hf_fp8.h).
#include "engine/checkpoint/hf_fp8.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/checkpoint/files.h"
#include "engine/json.h"
#include "kernels/error.h"
#include "kernels/numeric.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

namespace {

// weight_block_size as two sizes >= 1, or false.
bool block_pair(const Json* v, int64_t& rows, int64_t& cols) {
  if (!v || v->kind() != Json::Kind::array || v->items().size() != 2) return false;
  const Json &r = v->items()[0], &c = v->items()[1];
  // Bounded before the casts: a block past 2^30 rows is no weight's.
  auto whole = [](const Json& x) {
    return x.is_number() && x.as_number() >= 1 && x.as_number() <= double(1 << 30) &&
           x.as_number() == std::floor(x.as_number());
  };
  if (!whole(r) || !whole(c)) return false;
  rows = static_cast<int64_t>(r.as_number()), cols = static_cast<int64_t>(c.as_number());
  return true;
}

}  // namespace

void check_quantization(const ConfigCheck& c) {
  if (!c.get("quantization_config")) return;
  const ConfigCheck q = c.member("quantization_config");
  const std::string method = q.text("quant_method", "");
  c.require(method == "fp8", "quantization_config.quant_method is \"{}\": this trainer reads fine-grained "
            "fp8 checkpoints (quant_method fp8: F8_E4M3 weights with a weight_scale_inv per block) and "
            "unquantized ones (dequantize others first)", method);
  if (method != "fp8") return;
  const std::string format = q.text("fmt", "e4m3");
  c.require(format == "e4m3", "quantization_config.fmt is \"{}\": this trainer reads E4M3 fp8 weights", format);
  const std::string activations = q.text("activation_scheme", "dynamic");
  c.require(activations == "dynamic", "quantization_config.activation_scheme is \"{}\": this trainer reads "
            "checkpoints without static activation scales (activation_scheme dynamic)", activations);
  int64_t rows = 0, cols = 0;
  const Json* blocks = q.get("weight_block_size");
  c.require(!blocks || block_pair(blocks, rows, cols), "quantization_config.weight_block_size is {}: "
            "expected [rows, columns] of whole numbers >= 1 (per-block weight_scale_inv)",
            blocks ? blocks->dump() : "");
}

Fp8Blocks fp8_blocks(const std::string& path) {
  Fp8Blocks b;
  const fs::path config = fs::path(path) / "config.json";
  if (!fs::is_directory(path) || !fs::exists(config)) return b;
  const Json j = parse_json(read_text_file(config.string()), config.string());
  const Json* q = j.find("quantization_config");
  if (!q || !q->is_object()) return b;
  const Json* size = q->find("weight_block_size");
  if (size && block_pair(size, b.rows, b.cols))
    b.from = fmt::format("{}'s quantization_config.weight_block_size [{}, {}]", config.string(), b.rows, b.cols);
  else
    b.from = fmt::format("{}'s quantization_config (the default 128 x 128 blocks)", config.string());
  return b;
}

HostTensor dequantize_fp8(const SafetensorsFile& file, const std::string& name,
                          const SafetensorsFile& scale_file, const std::string& scale_name,
                          const Fp8Blocks& blocks) {
  const TensorView& w = file.tensor(name);
  TRAINER_INPUT_CHECK(w.shape.size() == 2, "{}: tensor \"{}\" is F8_E4M3 of shape [{}]: this trainer "
                      "dequantizes 2-d fp8 weights (out, in) only", file.path(), name, fmt::join(w.shape, ", "));
  const int64_t R = w.shape[0], C = w.shape[1];
  const int64_t br = (R + blocks.rows - 1) / blocks.rows, bc = (C + blocks.cols - 1) / blocks.cols;
  const TensorView& sv = scale_file.tensor(scale_name);
  TRAINER_INPUT_CHECK(sv.shape == std::vector<int64_t>({br, bc}), "{}: tensor \"{}\" has shape [{}], "
                      "expected [{}, {}]: one scale per block of \"{}\" [{}, {}] in {}", scale_file.path(),
                      scale_name, fmt::join(sv.shape, ", "), br, bc, name, R, C, blocks.from);
  const std::vector<float> s = scale_file.read_f32(scale_name);
  HostTensor t{{R, C}, std::vector<float>(static_cast<size_t>(R * C))};
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const uint8_t code = w.data[r * C + c];
      TRAINER_INPUT_CHECK((code & 0x7F) != 0x7F, "{}: tensor \"{}\" holds the fp8 NaN code 0x{:02X} at "
                          "[{}, {}] (a corrupt weight)", file.path(), name, code, r, c);
      t.data[r * C + c] = e4m3_to_f32(code) * s[(r / blocks.rows) * bc + c / blocks.cols];
    }
  return t;
}

void check_fp8_export(const model::ModelConfig& cfg, const std::string& architecture) {
  const bool dense_llama = cfg.is_llama() && !cfg.moe_enabled;
  TRAINER_INPUT_CHECK(dense_llama || cfg.mla.enabled, "--dtype fp8: writes fine-grained fp8 for "
                      "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and "
                      "DeepseekV3ForCausalLM models, not {} ({}; export bf16 instead)", architecture,
                      cfg.is_llama() ? "its routers are nn.Linear layers transformers would expect in fp8 "
                                       "unless named in modules_to_not_convert"
                                     : "GPT-2's Conv1D layers are not quantized by transformers' fp8 loader");
}

bool fp8_exported(const std::string& name, const std::vector<int64_t>& shape) {
  return shape.size() == 2 && name.rfind("model.layers.", 0) == 0 && ends_with(name, ".weight") &&
         !ends_with(name, ".mlp.gate.weight");
}

Fp8Weight quantize_fp8(const HostTensor& w, int64_t block_rows, int64_t block_cols) {
  TRAINER_CHECK(w.shape.size() == 2, "quantize_fp8: a {}-d tensor", w.shape.size());
  const int64_t R = w.shape[0], C = w.shape[1];
  const int64_t br = (R + block_rows - 1) / block_rows, bc = (C + block_cols - 1) / block_cols;
  Fp8Weight q{std::vector<uint8_t>(static_cast<size_t>(R * C)),
              HostTensor{{br, bc}, std::vector<float>(static_cast<size_t>(br * bc), 0.0f)}};
  auto block = [&](int64_t r, int64_t c) { return (r / block_rows) * bc + c / block_cols; };
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      q.scales.data[block(r, c)] = std::max(q.scales.data[block(r, c)], std::fabs(w.data[r * C + c]));
  for (float& s : q.scales.data) s = s > 0 ? s / 448.0f : 1.0f;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) q.codes[r * C + c] = f32_to_e4m3(w.data[r * C + c] / q.scales.data[block(r, c)]);
  return q;
}

Json fp8_quantization_config(const model::ModelConfig& cfg, int64_t block_rows, int64_t block_cols) {
  Json q = Json::object();
  q.set("activation_scheme", Json("dynamic"));
  q.set("fmt", Json("e4m3"));
  // DeepSeek-V3's hub config has no such key; Qwen3's -FP8 ones name lm_head.
  if (!cfg.mla.enabled) {
    Json keep = Json::array();
    keep.push(Json("lm_head"));
    q.set("modules_to_not_convert", std::move(keep));
  }
  q.set("quant_method", Json("fp8"));
  Json blocks = Json::array();
  blocks.push(Json(block_rows));
  blocks.push(Json(block_cols));
  q.set("weight_block_size", std::move(blocks));
  return q;
}

}  // namespace trainer::engine::checkpoint
