// Hugging Face GPT-2 / Llama / Qwen2 / Qwen3 / Mixtral / Qwen3-MoE / DeepSeek-V3 safetensors in
// (model.init_from); out is hf_export.cpp.
#include "engine/checkpoint/hf_interop.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <utility>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_config.h"
#include "engine/checkpoint/hf_deepseek.h"
#include "engine/checkpoint/hf_fp8.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/state_range.h"
#include "engine/json.h"
#include "engine/model_from_spec.h"
#include "engine/single_rank.h"
#include "kernels/error.h"
#include "kernels/memory.h"
#include "model/model.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Resizes dim 0 to n rows: zero rows appended, or trailing rows dropped.
HostTensor resize_rows(HostTensor t, int64_t n) {
  int64_t row = t.shape.size() == 2 ? t.shape[1] : 1;
  t.data.resize(static_cast<size_t>(n * row), 0.0f);
  t.shape[0] = n;
  return t;
}

// The tensors of an HF checkpoint: one file or the shards of an index.
class HfSource {
 public:
  // `expected`: the class whose tensors the job's model reads (named when one is missing).
  HfSource(const std::string& path, std::string expected)
      : expected_(std::move(expected)), fp8_(fp8_blocks(path)) {
    if (fs::is_directory(path)) {
      fs::path index = fs::path(path) / "model.safetensors.index.json";
      fs::path single = fs::path(path) / "model.safetensors";
      if (fs::exists(index)) {
        Json j = parse_json(read_text_file(index.string()), index.string());
        try {
          for (const auto& [name, file] : j.at("weight_map").members())
            where_[name] = (fs::path(path) / file.as_string()).string();
        } catch (const std::runtime_error& e) {
          throw InputError(fmt::format("{}: weight_map: {}", index.string(), e.what()));
        }
        return;
      }
      TRAINER_INPUT_CHECK(fs::exists(single), "{}: holds neither model.safetensors nor "
                          "model.safetensors.index.json", path);
      add_file(single.string());
      return;
    }
    TRAINER_INPUT_CHECK(fs::exists(path), "{}: no such file (model.init_from)", path);
    add_file(path);
  }

  // The HF name holding `name`, trying GPT-2's names without "transformer." too.
  std::string find(const std::string& name) const {
    if (where_.count(name)) return name;
    const std::string prefix = "transformer.";
    if (name.rfind(prefix, 0) == 0 && where_.count(name.substr(prefix.size())))
      return name.substr(prefix.size());
    return "";
  }

  HostTensor get(const std::string& name) const {
    std::string found = find(name);
    TRAINER_INPUT_CHECK(!found.empty(), "{}: no tensor \"{}\" (expected a {} checkpoint)", origin(),
                        name, expected_);
    const SafetensorsFile& f = file(where_.at(found));
    if (f.tensor(found).dtype == "F8_E4M3") {  // fine-grained fp8 (hf_fp8.h): its scales may be in another shard
      const std::string scale = found + "_scale_inv";
      TRAINER_INPUT_CHECK(where_.count(scale), "{}: tensor \"{}\" is F8_E4M3 but the checkpoint has no "
                          "\"{}\" (this trainer reads fp8 weights with per-block scales, as DeepSeek-V3's)",
                          f.path(), found, scale);
      return dequantize_fp8(f, found, file(where_.at(scale)), scale, fp8_);
    }
    return {f.tensor(found).shape, f.read_f32(found)};
  }

  // A checkpoint of a bigger model must not load as its first layers or
  // experts: every layer and expert index in a tensor name must exist here.
  // `extra_layers`: layers past model.n_layer the source may hold and the
  // model does not read (DeepSeek-V3's multi-token-prediction layers).
  void check_extent(const model::ModelConfig& cfg, int64_t extra_layers = 0) const {
    for (const auto& [name, file] : where_) {
      for (const std::string key : {"h.", "layers.", "experts."}) {
        // The key as a whole name component: at the start or after a '.'.
        size_t at = 0;
        while ((at = name.find(key, at)) != std::string::npos && at > 0 && name[at - 1] != '.') ++at;
        if (at == std::string::npos) continue;
        size_t begin = at + key.size(), end = begin;
        while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
        if (end == begin || end == name.size() || name[end] != '.') continue;
        const bool expert = key == "experts.";
        const long index = std::stol(name.substr(begin, end - begin));
        const long limit = expert ? cfg.moe.n_experts : cfg.n_layer + extra_layers;
        TRAINER_INPUT_CHECK(index < limit, "{}: tensor \"{}\" is of {} {}, but {} is {} (model.init_from)",
                            file, name, expert ? "expert" : "layer", index,
                            expert ? "model.moe.n_experts" : "model.n_layer", limit);
      }
    }
  }

  // A llama-family model reads no bias or q/k norm it does not have, so one
  // left over would be dropped without a word: a Qwen2 or Qwen3 file (or a
  // Llama one saved with attention_bias or mlp_bias) read as a plain Llama
  // without its config.json. DeepSeek-V3's expert-choice bias is dropped only
  // when all zero (as an export of a model without aux_free writes it).
  void check_unread(const model::ModelConfig& cfg) const {
    if (!cfg.is_llama()) return;
    for (const auto& [name, file] : where_) {
      if (ends_with(name, ".e_score_correction_bias") && cfg.moe.balance != model::MoeBalance::aux_free) {
        const HostTensor b = get(name);
        TRAINER_INPUT_CHECK(std::all_of(b.data.begin(), b.data.end(), [](float x) { return x == 0.0f; }),
                            "{}: tensor \"{}\" is a nonzero expert-choice bias the job's model has not "
                            "(model.moe.balance: aux_free reads it) (model.init_from)", file, name);
        continue;
      }
      const bool qk_norm = ends_with(name, ".q_norm.weight") || ends_with(name, ".k_norm.weight");
      TRAINER_INPUT_CHECK(!qk_norm || cfg.qk_norm, "{}: tensor \"{}\" is a q/k norm the job's model "
                          "has not (a Qwen3 checkpoint needs model.qk_norm: true) (model.init_from)",
                          file, name);
      if (!ends_with(name, ".bias") || ends_with(name, ".e_score_correction_bias")) continue;
      const bool qkv = ends_with(name, ".q_proj.bias") || ends_with(name, ".k_proj.bias") ||
                       ends_with(name, ".v_proj.bias");
      TRAINER_INPUT_CHECK(qkv && cfg.qkv_bias, "{}: tensor \"{}\" is a bias the job's model has not{} "
                          "(model.init_from)", file, name,
                          qkv ? " (a Qwen2 checkpoint needs model.qkv_bias: true)" : "");
    }
  }

  std::string file_of(const std::string& name) const {
    std::string found = find(name);
    return found.empty() ? origin() : where_.at(found);
  }

 private:
  void add_file(const std::string& p) {
    const SafetensorsFile& f = file(p);
    for (const auto& [name, view] : f.tensors()) where_[name] = p;
    origin_ = p;
  }
  const SafetensorsFile& file(const std::string& p) const {
    auto& slot = open_[p];
    if (!slot) slot = std::make_unique<SafetensorsFile>(p);
    return *slot;
  }
  std::string origin() const { return origin_.empty() ? where_.begin()->second : origin_; }

  std::string expected_;
  Fp8Blocks fp8_;
  std::map<std::string, std::string> where_;
  std::string origin_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

// One of our parameters (global, padded, (out, in)) from the HF tensors.
// `interleaved`: DeepSeek-V3's RoPE rows are interleaved pairs (hf_deepseek.h).
HostTensor from_hf(const HfSource& src, const model::ParamSpec& spec, const model::ModelConfig& cfg,
                   bool interleaved) {
  const std::string& n = spec.name;
  const int64_t C = cfg.d_model;
  HostTensor t;
  if (!cfg.is_llama() && gpt2_qkv(n)) {
    size_t at = n.find(".attn.") + 6;
    int which = n[at] == 'q' ? 0 : n[at] == 'k' ? 1 : 2;
    bool weight = ends_with(n, ".weight");
    std::string fused = n.substr(0, at) + (weight ? "c_attn.weight" : "c_attn.bias");
    HostTensor f = src.get(fused);
    std::vector<int64_t> want = weight ? std::vector<int64_t>{C, 3 * C} : std::vector<int64_t>{3 * C};
    TRAINER_INPUT_CHECK(f.shape == want, "{}: tensor \"{}\" has shape {}, expected {} for d_model {}",
                        src.file_of(fused), fused, shape_str(f.shape), shape_str(want), C);
    if (!weight) return rows(f, which * C, (which + 1) * C);
    // Conv1D (in, 3C): columns [which*C, (which+1)*C) are this projection's (in, out).
    HostTensor part{{C, C}, std::vector<float>(static_cast<size_t>(C * C))};
    for (int64_t i = 0; i < C; ++i)
      for (int64_t o = 0; o < C; ++o) part.data[i * C + o] = f.data[i * 3 * C + which * C + o];
    return transpose(part);
  }
  if (ends_with(n, ".e_score_correction_bias") && src.find(hf_tensor_name(cfg, n)).empty())
    // Mixtral has no expert bias: an aux_free job started from one starts it at zero, as a fresh one does.
    return HostTensor{spec.global_shape, std::vector<float>(static_cast<size_t>(spec.global_shape[0]), 0.0f)};
  bool lm_head = n == "lm_head.weight";
  std::string source = hf_tensor_name(cfg, n);
  if (lm_head && src.find(n).empty())  // an HF model with tied embeddings stores only the table
    source = cfg.is_llama() ? "model.embed_tokens.weight" : "transformer.wte.weight";
  t = src.get(source);
  bool conv1d = !cfg.is_llama() && gpt2_conv1d_weight(n);
  if (conv1d && t.shape.size() == 2) t = transpose(t);
  std::vector<int64_t> want = spec.global_shape;
  if (spec.valid_rows >= 0 && t.shape.size() == 2 && t.shape[0] == spec.valid_rows) {
    t = resize_rows(std::move(t), want[0]);  // zero padding rows
  } else if (n == "transformer.wpe.weight" && t.shape.size() == 2 && t.shape[0] >= want[0] &&
             t.shape[1] == want[1]) {
    t = rows(t, 0, want[0]);  // positions beyond model.max_seq_len are never used
  }
  if (spec.valid_rows >= 0 && want.size() == 2)
    TRAINER_INPUT_CHECK(t.shape == want, "{}: tensor \"{}\" has shape {}, expected [{}, {}] "
                        "(model.vocab_size {}, d_model {})", src.file_of(source), source,
                        shape_str(t.shape), spec.valid_rows, want[1], spec.valid_rows, want[1]);
  TRAINER_INPUT_CHECK(t.shape == want, "{}: tensor \"{}\" has shape {}, the model expects {}{}",
                      src.file_of(source), source, shape_str(t.shape), shape_str(want),
                      conv1d ? " after transposing Conv1D (in, out)" : "");
  return interleaved ? deepseek_rope_rows(cfg, n, std::move(t), false) : t;
}

}  // namespace

void load_hf_weights(const std::string& path, const model::ModelConfig& cfg, model::Buffers& buffers,
                     Context& ctx, const ShardPosition& position, const AdamW* zero3) {
  (void)ctx;  // copies are synchronous through copy_from_host
  TRAINER_CHECK(!zero3 || zero3->layout().shards_parameters(),
                "load_hf_weights: the optimizer given does not shard the parameters");
  std::string cls = hf_class(cfg);  // first: it refuses a model no class computes
  if (fs::path config = fs::path(path) / "config.json"; fs::is_directory(path) && fs::exists(config))
    check_hf_config(config.string(), cfg);
  HfSource src(path, std::move(cls));
  const DeepseekSource deepseek = cfg.mla.enabled ? deepseek_source(path) : DeepseekSource{};
  src.check_extent(cfg, deepseek.mtp_layers);
  src.check_unread(cfg);
  std::vector<float> local;
  for (int i = 0; i < static_cast<int>(buffers.params().size()); ++i) {
    const model::Buffers::Param& p = buffers.params()[i];
    // Every rank reads every tensor it holds a part of: the sources checked
    // alike everywhere, so a bad file is refused by all ranks together.
    HostTensor global = from_hf(src, p.spec, cfg, deepseek.rope_interleave);
    const model::BufferInfo& info = buffers.buffers()[p.value];
    Slice dst = local_slice(p.spec, info.shape, position);
    Tensor target = buffers.get(p.value);
    if (zero3) {
      // The arena holds a gathered unit only while a block runs: the values
      // live in this rank's shard, exactly the range a resume reads.
      StateRange st = state_range(dst, i, *zero3);
      if (st.empty()) continue;
      dst = st.slice;
      target = st.view(zero3->param_shards());
    }
    Slice full = Slice::whole(p.spec.global_shape, p.spec.tp_dim, p.spec.valid_rows);
    local.assign(static_cast<size_t>(dst.numel()), 0.0f);
    copy_overlap(full, global.data.data(), dst, local.data());
    copy_from_host(target, local.data());
  }
}

}  // namespace trainer::engine::checkpoint
