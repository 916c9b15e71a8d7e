// trainer export --format hf (see hf_interop.h): a checkpoint streamed tensor
// by tensor into Hugging Face safetensors, in HF's names and layouts.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_config.h"
#include "engine/checkpoint/hf_deepseek.h"
#include "engine/checkpoint/hf_fp8.h"
#include "engine/checkpoint/hf_interop.h"
#include "engine/checkpoint/hf_tokenizer.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/json.h"
#include "engine/model_from_spec.h"
#include "engine/single_rank.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/error.h"
#include "model/model.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

namespace {

// One tensor of the export: its HF name and shape, and how to compute it
// from the checkpoint when its turn to be written comes.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<HostTensor()> make;
};

using ReadOurs = std::function<HostTensor(const std::string&)>;

// Our global (padded, unfused, (out, in)) tensors -> HF's, sorted by name.
std::vector<HfTensor> hf_tensors(const model::ModelConfig& cfg,
                                 const std::vector<std::pair<std::string, std::vector<int64_t>>>& ours,
                                 const ReadOurs& read) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size;
  std::vector<HfTensor> out;
  for (const auto& [name, shape] : ours) {
    const std::string n = name;
    if (n == "model.embed_tokens.weight" || n == "transformer.wte.weight" || n == "lm_head.weight")
      out.push_back({n, {V, shape[1]}, [=] { return rows(read(n), 0, V); }});  // vocabulary unpadded
    else if (!cfg.is_llama() && gpt2_qkv(n))
      continue;  // fused into c_attn below
    else if (!cfg.is_llama() && gpt2_conv1d_weight(n))
      out.push_back({n, {shape[1], shape[0]}, [=] { return transpose(read(n)); }});
    else
      out.push_back({hf_tensor_name(cfg, n), shape, [=] { return deepseek_rope_rows(cfg, n, read(n), true); }});
  }
  // DeepseekV3ForCausalLM's router always adds its expert-choice bias: zero
  // for a model without aux_free's.
  if (cfg.mla.enabled && cfg.moe.balance != model::MoeBalance::aux_free) {
    const int64_t E = cfg.moe.n_experts;
    for (int l = 0; l < cfg.n_layer; ++l)
      if (cfg.is_moe_layer(l))
        out.push_back({fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", l), {E},
                       [=] { return HostTensor{{E}, std::vector<float>(static_cast<size_t>(E), 0.0f)}; }});
  }
  for (int l = 0; l < cfg.n_layer && !cfg.is_llama(); ++l) {
    const std::string p = fmt::format("transformer.h.{}.attn.", l);
    static const char* parts[3] = {"q_proj", "k_proj", "v_proj"};
    // Conv1D (in C, 3C): columns [k*C, (k+1)*C) are projection k's (in, out).
    out.push_back({p + "c_attn.weight", {C, 3 * C}, [=] {
                     HostTensor w{{C, 3 * C}, std::vector<float>(static_cast<size_t>(3 * C * C))};
                     for (int k = 0; k < 3; ++k) {
                       HostTensor wk = read(p + parts[k] + ".weight");  // (out C, in C)
                       for (int64_t o = 0; o < C; ++o)
                         for (int64_t i = 0; i < C; ++i) w.data[i * 3 * C + k * C + o] = wk.data[o * C + i];
                     }
                     return w;
                   }});
    out.push_back({p + "c_attn.bias", {3 * C}, [=] {
                     HostTensor b{{3 * C}, std::vector<float>(static_cast<size_t>(3 * C))};
                     for (int k = 0; k < 3; ++k) {
                       HostTensor bk = read(p + parts[k] + ".bias");
                       std::copy(bk.data.begin(), bk.data.end(), b.data.begin() + k * C);
                     }
                     return b;
                   }});
  }
  std::sort(out.begin(), out.end(), [](const HfTensor& a, const HfTensor& b) { return a.name < b.name; });
  return out;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// fp8: the layers' projection weights in fp8 blocks with their F32 scales
// (hf_fp8.h), every other tensor in bf16, as DeepSeek's hub files.
struct ExportDtype {
  const char* safetensors;  // "F32", "BF16", "F16"
  const char* torch;        // config.json's torch_dtype
  size_t bytes;
  DType dtype;
  bool fp8 = false;
};

ExportDtype export_dtype(const std::string& name) {
  if (name == "fp32") return {"F32", "float32", 4, DType::f32};
  if (name == "bf16") return {"BF16", "bfloat16", 2, DType::bf16};
  if (name == "fp16") return {"F16", "float16", 2, DType::f16};
  if (name == "fp8") return {"BF16", "bfloat16", 2, DType::bf16, true};
  throw InputError(fmt::format("--dtype: '{}' is not an export dtype (expected fp32, bf16, fp16 or fp8)", name));
}

// One file entry: a tensor as the dtype says, or an fp8 weight's codes or scales.
struct Entry {
  const HfTensor* t;
  enum Part { whole, codes, scales } part;
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  uint64_t bytes;
};

std::vector<Entry> file_entries(const std::vector<HfTensor>& tensors, const ExportDtype& dtype,
                                int64_t block_rows, int64_t block_cols) {
  std::vector<Entry> out;
  for (const HfTensor& t : tensors) {
    const uint64_t n = static_cast<uint64_t>(numel(t.shape));
    if (!dtype.fp8 || !fp8_exported(t.name, t.shape)) {
      out.push_back({&t, Entry::whole, t.name, t.shape, dtype.safetensors, n * dtype.bytes});
      continue;
    }
    const std::vector<int64_t> grid{(t.shape[0] + block_rows - 1) / block_rows,
                                    (t.shape[1] + block_cols - 1) / block_cols};
    out.push_back({&t, Entry::codes, t.name, t.shape, "F8_E4M3", n});
    out.push_back({&t, Entry::scales, t.name + "_scale_inv", grid, "F32",
                   static_cast<uint64_t>(numel(grid)) * 4});
  }
  return out;
}

// HF's shard file names (save_pretrained's).
std::string shard_name(size_t i, size_t n) {
  return n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
}

bool is_model_file(const std::string& f) {
  return f == "model.safetensors" || (f.rfind("model-", 0) == 0 && ends_with(f, ".safetensors") &&
                                      f.find("-of-") != std::string::npos);
}

}  // namespace

std::string export_hf(const std::string& path, const std::string& out_dir, FILE* log,
                      const HfExportOptions& options) {
  std::string step_dir = resolve_checkpoint(path, stderr);
  CheckpointReader reader(step_dir);
  // Global tensors: the single-rank layout (a cp, tp or ZeRO-3 job declares
  // split or shared parameters).
  const model::ModelConfig cfg = model_config(single_rank_spec(reader.job_spec(), 1));
  std::string architecture;
  try {
    architecture = hf_architecture(cfg);  // refused before anything is written
  } catch (const InputError& e) {
    throw InputError(fmt::format("export {}: {}", step_dir, e.what()));
  }
  const ExportDtype dtype = export_dtype(options.dtype);
  if (dtype.fp8) check_fp8_export(cfg, architecture);
  TRAINER_INPUT_CHECK(options.max_shard_bytes > 0, "--max-shard-size: expected a size above 0");
  TRAINER_INPUT_CHECK(options.vocab.empty() == options.merges.empty(),
                      "--vocab and --merges: give both (the tokenizer's two files) or neither");
  TRAINER_INPUT_CHECK(options.vocab.empty() || options.tokenizer.empty(),
                      "--tokenizer: give it or --vocab and --merges, not both");
  std::optional<HfTokenizerExport> tok;
  if (!options.vocab.empty()) tok = HfTokenizerExport::gpt2_files(options.vocab, options.merges, cfg);
  if (!options.tokenizer.empty()) tok = HfTokenizerExport::tokenizer_json(options.tokenizer, cfg);

  // Declaring a model allocates nothing; it lists the parameters and their global shapes.
  model::Model declared(cfg, model::BatchShape{1, 1});
  std::vector<std::pair<std::string, std::vector<int64_t>>> ours;
  std::map<std::string, const model::ParamSpec*> specs;
  for (const auto& p : declared.buffers().params()) {
    ours.emplace_back(p.spec.name, p.spec.global_shape);
    specs[p.spec.name] = &p.spec;
  }
  ReadOurs read = [&](const std::string& name) {
    const model::ParamSpec& s = *specs.at(name);
    Slice full = Slice::whole(s.global_shape, s.tp_dim, s.valid_rows);
    HostTensor t{s.global_shape, std::vector<float>(static_cast<size_t>(full.numel()))};
    reader.read(name, full, t.data.data());
    return t;
  };
  const std::vector<HfTensor> tensors = hf_tensors(cfg, ours, read);
  const int64_t block_rows = options.fp8_block_rows, block_cols = options.fp8_block_cols;
  TRAINER_INPUT_CHECK(block_rows >= 1 && block_cols >= 1, "--fp8-block: expected rows and columns >= 1, got "
                      "{} x {}", block_rows, block_cols);
  const std::vector<Entry> entries = file_entries(tensors, dtype, block_rows, block_cols);

  // save_pretrained's split: a new shard when the next tensor would overflow this one.
  std::vector<std::vector<const Entry*>> shards;
  uint64_t in_shard = 0, total = 0;
  for (const Entry& e : entries) {
    if (shards.empty() || (in_shard > 0 && in_shard + e.bytes > options.max_shard_bytes)) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&e);
    in_shard += e.bytes;
    total += e.bytes;
  }

  fs::create_directories(out_dir);
  const fs::path dir(out_dir);
  std::set<std::string> written;
  Json weight_map = Json::object();
  // Files are filled in entry order, so an fp8 weight's scales come right
  // after its codes (the next fill, in this shard or the next): the codes'
  // fill keeps them, and each weight is read and quantized once.
  struct {
    const HfTensor* t = nullptr;
    HostTensor scales;
  } kept;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shard_name(i, shards.size());
    SafetensorsWriter w;
    w.set_metadata("format", "pt");  // transformers refuses files without it
    for (const Entry* e : shards[i]) {
      weight_map.set(e->name, Json(file));
      w.add_lazy(e->name, e->dtype, e->shape, [e, dtype, block_rows, block_cols, &kept](void* dst) {
        const HfTensor* t = e->t;
        if (e->part == Entry::scales && kept.t == t) {
          std::memcpy(dst, kept.scales.data.data(), kept.scales.data.size() * sizeof(float));
          kept.t = nullptr;
          return;
        }
        HostTensor h = t->make();
        TRAINER_CHECK(h.shape == t->shape, "export: {} computed with another shape", t->name);
        if (e->part != Entry::whole) {
          Fp8Weight q = quantize_fp8(h, block_rows, block_cols);
          if (e->part == Entry::codes) {
            std::memcpy(dst, q.codes.data(), q.codes.size());
            kept.t = t, kept.scales = std::move(q.scales);
          } else {
            std::memcpy(dst, q.scales.data.data(), q.scales.data.size() * sizeof(float));
          }
        } else if (dtype.dtype == DType::f32) {
          std::memcpy(dst, h.data.data(), h.data.size() * sizeof(float));
        } else {
          cpu::from_f32(dtype.dtype, h.data.data(), dst, static_cast<int64_t>(h.data.size()));
        }
      });
    }
    replace_file_with((dir / file).string(), [&](const std::string& tmp) { w.write(tmp); });
    written.insert(file);
  }
  if (tok) tok->write(out_dir);
  // The index switches a loader from an earlier export's files to these.
  const fs::path index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (shards.size() > 1) {
    Json meta = Json::object();
    meta.set("total_size", Json(total));
    Json j = Json::object();
    j.set("metadata", std::move(meta));
    j.set("weight_map", std::move(weight_map));
    replace_file_atomically(index.string(), j.dump(2) + "\n");
  } else {
    fs::remove(index, ec);
  }
  replace_file_atomically((dir / "config.json").string(),
                          hf_config_json(cfg, {.torch_dtype = dtype.torch,
                                               .bos_id = tok ? tok->bos_id() : -1,
                                               .eos_id = tok ? tok->eos_id() : -1,
                                               .fp8_block_rows = dtype.fp8 ? block_rows : 0,
                                               .fp8_block_cols = dtype.fp8 ? block_cols : 0}));
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string f = entry.path().filename().string();
    if (is_model_file(f) && !written.count(f)) fs::remove(entry.path(), ec);  // an earlier export's
  }
  if (log) {
    std::string files = shards.size() == 1 ? "model.safetensors"
                                           : fmt::format("{} shards + model.safetensors.index.json",
                                                         shards.size());
    fmt::print(log, "exported {} (step {}) as {} model: {}/{} ({} tensors, {}, {:.1f} MB), config.json\n",
               step_dir, reader.step(), architecture, out_dir, files, entries.size(),
               dtype.fp8 ? fmt::format("fp8 blocks of {} x {}, the rest bf16", block_rows, block_cols)
                         : options.dtype,
               total / 1e6);
    if (tok)
      fmt::print(log, "tokenizer: {}/{}, tokenizer_config.json, special_tokens_map.json\n", out_dir,
                 options.tokenizer.empty() ? "vocab.json, merges.txt" : "tokenizer.json");
  }
  return step_dir;
}

}  // namespace trainer::engine::checkpoint
