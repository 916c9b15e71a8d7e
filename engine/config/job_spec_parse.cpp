// load_job_spec / parse_job_spec: YAML text + --set overrides -> a checked JobSpec.
// Order: YAML syntax, overrides, unknown keys, each section's types and ranges,
// then cross-field consistency (job_spec_check.cpp), so the first error a user
// sees is the most basic one.
#include "engine/config/job_spec.h"
#include "engine/config/job_spec_check.h"
#include "engine/config/spec_enums.h"
#include "engine/config/spec_reader.h"
#include "kernels/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace trainer::engine {
namespace {

using spec::Section;
using spec::SpecReader;

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

// Applies one "key.path=value" to the YAML tree; the value is parsed as YAML.
void apply_override(YAML::Node& root, const std::string& arg, SpecReader& r) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(fmt::format("--set {}: expected key.path=value", arg));
  const std::string path = arg.substr(0, eq);
  const std::vector<std::string> parts = split_path(path);
  const spec::KeyNode* key = &spec::key_tree();
  std::string walked;
  for (const auto& part : parts) {
    const spec::KeyNode* next = key->child(part);
    const std::string here = walked.empty() ? part : walked + "." + part;
    if (!next)
      throw InputError(fmt::format("--set: unknown key '{}'{}", here,
                                   spec::did_you_mean(*key, walked, part)));
    key = next;
    walked = here;
  }
  YAML::Node value =
      spec::load_yaml_document(arg.substr(eq + 1), "--set " + path, spec::YamlSource::set_value);
  // Node::reset rebinds; plain assignment between Nodes would overwrite contents.
  YAML::Node node;
  node.reset(root);
  std::string node_path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    node_path = node_path.empty() ? parts[i] : node_path + "." + parts[i];
    YAML::Node child = node[parts[i]];
    if (!child.IsDefined() || child.IsNull()) {
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    } else if (!child.IsMap()) {
      r.fail(node_path, child.Mark(), "expected a map of keys, got " + spec::describe(child));
    }
    YAML::Node next = node[parts[i]];
    node.reset(next);
  }
  node[parts.back()] = value;
  r.add_override(path);
}

// Refuses unknown and duplicate keys, and sections that are not maps, before
// any value is read; records each key's line, which errors about its value report
// (a null or multi-line value's own mark is on a later line).
void check_keys(const YAML::Node& map, const spec::KeyNode& keys, const std::string& path,
                SpecReader& r) {
  std::set<std::string> seen;
  // Copies, not references: yaml-cpp's iterator hands out a temporary pair.
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node k = it->first;
    const std::string name = k.IsScalar() ? k.Scalar() : spec::describe(k);
    const std::string full = path.empty() ? name : path + "." + name;
    const spec::KeyNode* key = k.IsScalar() ? keys.child(name) : nullptr;
    if (!key)
      throw InputError(fmt::format("{}: unknown key '{}'{}", r.where(full, k.Mark()), full,
                                   spec::did_you_mean(keys, path, name)));
    if (!seen.insert(name).second)
      throw InputError(fmt::format("{}: {}: duplicate key", r.where(full, k.Mark()), full));
    r.record(full, k.Mark());
    if (!key->is_section()) continue;
    const YAML::Node v = it->second;
    if (v.IsMap()) {
      check_keys(v, *key, full, r);
    } else if (!v.IsNull()) {
      r.fail(full, v.Mark(), "expected a map of keys, got " + spec::describe(v));
    }
  }
}

void read_run(Section s, RunSpec& run) {
  s.read("name", run.name);
  s.read("dir", run.dir);
  s.read("seed", run.seed);
  s.read("device", run.device, spec::kDeviceChoices);
  s.read("attention", run.attention, spec::kAttentionChoices);
  if (run.dir.empty()) run.dir = "runs/" + run.name;
}

void read_moe(Section s, MoESpec& moe) {
  moe.enabled = true;
  s.read("n_experts", moe.n_experts, 2, 1 << 16);
  s.read("top_k", moe.top_k, 1);
  s.read("n_shared_experts", moe.n_shared_experts, 0, 1 << 16);
  s.read("shared_expert_gate", moe.shared_expert_gate);
  s.read("d_ff_expert", moe.d_ff_expert, 1, 1 << 24);
  s.read("every", moe.every, 1);
  s.read("first_dense", moe.first_dense, 0, 16384);
  s.read("balance", moe.balance, spec::kBalanceChoices);
  s.read("score", moe.score, spec::kScoreChoices);
  s.read("normalize_topk", moe.normalize_topk);
  s.read("topk_scaling_factor", moe.topk_scaling_factor);
  s.reader().check_min(s.path("topk_scaling_factor"), moe.topk_scaling_factor, 0, /*strict=*/true);
  s.read("n_groups", moe.n_groups, 1, 1 << 16);
  s.read("top_groups", moe.top_groups, 1, 1 << 16);
  s.read("aux_loss_coeff", moe.aux_loss_coeff);
  s.reader().check_min(s.path("aux_loss_coeff"), moe.aux_loss_coeff, 0);
  s.read("z_loss_coeff", moe.z_loss_coeff);
  s.reader().check_min(s.path("z_loss_coeff"), moe.z_loss_coeff, 0);
  s.read("seq_aux_loss_coeff", moe.seq_aux_loss_coeff);
  s.reader().check_min(s.path("seq_aux_loss_coeff"), moe.seq_aux_loss_coeff, 0);
  s.read("bias_update_rate", moe.bias_update_rate);
  s.reader().check_min(s.path("bias_update_rate"), moe.bias_update_rate, 0);
  if (s.has("capacity_factor") && !s.is_null("capacity_factor")) {
    double cf = 0;
    s.read("capacity_factor", cf);
    s.reader().check_min(s.path("capacity_factor"), cf, 0, /*strict=*/true);
    moe.capacity_factor = cf;
  }
  s.read("ep_recv_headroom", moe.ep_recv_headroom);
  s.reader().check_min(s.path("ep_recv_headroom"), moe.ep_recv_headroom, 1);
}

void read_mla(Section s, MlaSpec& mla) {
  mla.enabled = true;
  if (s.has("q_lora_rank") && s.is_null("q_lora_rank"))
    mla.q_lora_rank = 0;
  else
    s.read("q_lora_rank", mla.q_lora_rank, 1, 1 << 20);
  s.read("kv_lora_rank", mla.kv_lora_rank, 1, 1 << 20);
  s.read("qk_nope_head_dim", mla.qk_nope_head_dim, 1, 1 << 16);
  s.read("qk_rope_head_dim", mla.qk_rope_head_dim, 2, 1 << 16);
  s.read("v_head_dim", mla.v_head_dim, 1, 1 << 16);
  SpecReader& r = s.reader();
  if (mla.qk_rope_head_dim % 2 != 0)
    r.fail(s.path("qk_rope_head_dim"), fmt::format("must be even (RoPE turns pairs of dims), got {}",
                                                   mla.qk_rope_head_dim));
  // The attention kernels take one head size: values are padded up to q/k's.
  if (mla.v_head_dim > mla.qk_nope_head_dim + mla.qk_rope_head_dim)
    r.fail(s.path("v_head_dim"), fmt::format("must be <= qk_nope_head_dim + qk_rope_head_dim ({}), "
                                             "got {}", mla.qk_nope_head_dim + mla.qk_rope_head_dim,
                                             mla.v_head_dim));
}

void read_rope_scaling(Section s, RopeScalingSpec& rs) {
  SpecReader& r = s.reader();
  rs.enabled = true;
  s.read("type", rs.type, spec::kRopeTypeChoices);
  // Each type's own keys: another type's would be silently ignored.
  const char* const only[][2] = {{"low_freq_factor", "llama3"},
                                 {"high_freq_factor", "llama3"},
                                 {"beta_fast", "yarn"},
                                 {"beta_slow", "yarn"},
                                 {"attention_factor", "yarn"},
                                 {"mscale", "yarn"},
                                 {"mscale_all_dim", "yarn"}};
  for (const auto& [key, type] : only)
    if (s.has(key) && std::string(type) != to_string(rs.type))
      r.fail(s.path(key), fmt::format("a key of type {}, not of type {}", type, to_string(rs.type)));
  if (rs.type == RopeType::linear && s.has("original_max_position_embeddings"))
    r.fail(s.path("original_max_position_embeddings"), "a key of types llama3 and yarn, not of type linear");
  s.read("factor", rs.factor);
  r.check_min(s.path("factor"), rs.factor, 1);
  s.read("low_freq_factor", rs.low_freq_factor);
  r.check_min(s.path("low_freq_factor"), rs.low_freq_factor, 0, true);
  s.read("high_freq_factor", rs.high_freq_factor);
  if (!(rs.high_freq_factor > rs.low_freq_factor))
    r.fail(s.path("high_freq_factor"), fmt::format("must be above low_freq_factor ({}), got {}",
                                                   rs.low_freq_factor, rs.high_freq_factor));
  s.read("original_max_position_embeddings", rs.original_max_position_embeddings, 1);
  s.read("beta_slow", rs.beta_slow);
  r.check_min(s.path("beta_slow"), rs.beta_slow, 0, true);
  s.read("beta_fast", rs.beta_fast);
  if (!(rs.beta_fast > rs.beta_slow))
    r.fail(s.path("beta_fast"), fmt::format("must be above beta_slow ({}), got {}", rs.beta_slow,
                                            rs.beta_fast));
  if (s.has("attention_factor") && !s.is_null("attention_factor")) {
    double a = 0;
    s.read("attention_factor", a);
    r.check_min(s.path("attention_factor"), a, 0, /*strict=*/true);
    rs.attention_factor = a;
  }
  for (auto [key, value] : {std::pair{"mscale", &rs.mscale}, {"mscale_all_dim", &rs.mscale_all_dim}})
    if (s.has(key) && !s.is_null(key)) {
      double m = 0;
      s.read(key, m);
      r.check_min(s.path(key), m, 0, /*strict=*/true);
      *value = m;
    }
  // transformers reads mscale only beside mscale_all_dim: alone it would do nothing.
  if (rs.mscale && !rs.mscale_all_dim)
    r.fail(s.path("mscale"), "needs mscale_all_dim beside it (YaRN's attention factor is "
                             "m(mscale) / m(mscale_all_dim); transformers ignores mscale alone)");
}

void read_model(Section s, ModelSpec& m) {
  SpecReader& r = s.reader();
  s.read("family", m.family, spec::kFamilyChoices);
  // Upper bounds far past any real model: beyond them a typo would make
  // `trainer plan` build millions of layers or sizes whose products wrap.
  s.read("n_layer", m.n_layer, 1, 16384);
  s.read("d_model", m.d_model, 1, 1 << 20);
  s.read("n_head", m.n_head, 1, 1 << 16);
  m.n_kv_head = m.n_head;
  s.read("n_kv_head", m.n_kv_head, 1);
  // Heads of their own size (Qwen3 0.6B: 16 x 128 over a width of 1024); null = d_model / n_head.
  if (s.has("head_dim") && !s.is_null("head_dim")) s.read("head_dim", m.head_size, 1, 1 << 16);
  s.read("d_ff", m.d_ff, 1, 1 << 24);
  s.read("vocab_size", m.vocab_size, 2, 1 << 24);
  s.read("max_seq_len", m.max_seq_len, 1, 1 << 24);
  m.tie_embeddings = m.family == Family::gpt2;
  s.read("tie_embeddings", m.tie_embeddings);
  // gpt2's biases come with its family (the resolved spec says true); the
  // key adds them to llama's q, k and v (Qwen2).
  bool qkv_bias = m.family == Family::gpt2;
  s.read("qkv_bias", qkv_bias);
  if (m.family == Family::gpt2 && !qkv_bias)
    r.fail(s.path("qkv_bias"), "gpt2 has biases on every projection, c_attn's q, k and v included "
                               "(attention without them needs family: llama)");
  m.qkv_bias = m.family == Family::llama && qkv_bias;
  s.read("qk_norm", m.qk_norm);
  // Mistral's sliding_window: a query sees itself and the W - 1 keys before
  // it (Megatron's --window-size L,0 is W = L + 1); null = full causal.
  if (s.has("sliding_window") && !s.is_null("sliding_window")) {
    s.read("sliding_window", m.sliding_window);
    if (m.sliding_window < 1 || m.sliding_window > (1 << 24))
      r.fail(s.path("sliding_window"), fmt::format("must be in 1..16777216, got {} (null: full causal "
                                                   "attention)", m.sliding_window));
  }
  // Megatron's --window-attn-skip-freq: layers N, 2N, ... (1-based) keep full
  // attention, the others the window (Gemma's sliding_window_pattern).
  if (s.has("full_attention_every") && !s.is_null("full_attention_every"))
    s.read("full_attention_every", m.full_attention_every, 2, 16384);
  s.read("rope_theta", m.rope_theta);
  r.check_min(s.path("rope_theta"), m.rope_theta, 0, true);
  if (s.has("rope_scaling") && !s.is_null("rope_scaling"))
    read_rope_scaling(Section(r, s.get("rope_scaling"), s.path("rope_scaling")), m.rope_scaling);
  s.read("norm_eps", m.norm_eps);
  r.check_min(s.path("norm_eps"), m.norm_eps, 0, true);
  s.read("init_std", m.init_std);
  r.check_min(s.path("init_std"), m.init_std, 0, true);
  s.read_nullable("init_from", m.init_from);
  // `moe: null` (or no moe key) is a dense model, so --set model.moe=null turns MoE off.
  if (s.has("moe") && !s.is_null("moe")) {
    read_moe(Section(r, s.get("moe"), s.path("moe")), m.moe);
  }
  if (s.has("mla") && !s.is_null("mla")) read_mla(Section(r, s.get("mla"), s.path("mla")), m.mla);
}

std::vector<DataSource> read_sources(SpecReader& r, const YAML::Node& n, const std::string& path) {
  std::vector<DataSource> out;
  auto one = [&](const YAML::Node& item, const std::string& item_path) {
    if (item.IsScalar()) {
      out.push_back({r.as_string(item, item_path), 1.0});
      return;
    }
    if (!item.IsMap())
      r.fail(item_path, item.Mark(),
             "expected a path or a {path:, weight:} map, got " + spec::describe(item));
    DataSource src;
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (key != "path" && key != "weight") {
        const char* close = spec::levenshtein(key, "path") <= 2     ? "path"
                            : spec::levenshtein(key, "weight") <= 2 ? "weight"
                                                                    : nullptr;
        const std::string hint =
            close ? fmt::format(" (did you mean '{}.{}'?)", item_path, close) : std::string();
        throw InputError(fmt::format("{}: unknown key '{}.{}'{}", r.where(item_path, it->first.Mark()),
                                     item_path, key, hint));
      }
    }
    if (!item["path"].IsDefined()) r.fail(item_path, item.Mark(), "missing 'path'");
    src.path = r.as_string(item["path"], item_path + ".path");
    if (item["weight"].IsDefined()) {
      src.weight = r.as_double(item["weight"], item_path + ".weight");
      if (!(src.weight > 0))
        r.fail(item_path + ".weight", item["weight"].Mark(),
               fmt::format("must be > 0, got {}", item["weight"].Scalar()));
    }
    out.push_back(src);
  };
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) one(n[i], fmt::format("{}[{}]", path, i));
  } else if (n.IsScalar() || n.IsMap()) {
    one(n, path);
  } else if (!n.IsNull()) {
    r.fail(path, n.Mark(), "expected a path, a list of paths, or a list of {path:, weight:} maps, got " +
                               spec::describe(n));
  }
  return out;
}

// data.split: a list of 2 or 3 shares (train, validation, test), or
// Megatron's "949,50,1" string; each >= 0, the train share > 0.
void read_split(SpecReader& r, const YAML::Node& n, const std::string& path, std::vector<double>& out) {
  std::vector<std::string> items;
  if (n.IsSequence()) {
    for (const auto& item : n) items.push_back(r.as_string(item, path));
  } else {
    std::string text = r.as_string(n, path);
    for (size_t start = 0;;) {
      const size_t comma = text.find(',', start);
      items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  std::string got = spec::describe(n);
  if (n.IsSequence()) {
    got = "[";
    for (size_t i = 0; i < items.size(); ++i) got += (i ? ", " : "") + items[i];
    got += "]";
  }
  const std::string want = "expected 2 or 3 shares (train, validation, test) >= 0 with train > 0, as a "
                           "list [949, 50, 1] or Megatron's \"949,50,1\", got " + got;
  if (items.size() < 2 || items.size() > 3) r.fail(path, n.Mark(), want);
  for (const std::string& item : items) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end == item.c_str() || *end != '\0' || !std::isfinite(v) || v < 0)
      r.fail(path, n.Mark(), want);
    out.push_back(v);
  }
  if (out[0] <= 0) r.fail(path, n.Mark(), want);
}

void read_data(Section s, DataSpec& d) {
  SpecReader& r = s.reader();
  if (!s.has("train")) r.fail(s.path("train"), "required: the training data (a path, glob or list)");
  d.train = read_sources(r, s.get("train"), s.path("train"));
  if (d.train.empty())
    r.fail(s.path("train"), s.get("train").Mark(), "expected at least one path, got " +
                                                       spec::describe(s.get("train")));
  if (s.has("val")) {
    d.val = read_sources(r, s.get("val"), s.path("val"));
  }
  if (s.has("split") && !s.is_null("split")) read_split(r, s.get("split"), s.path("split"), d.split);
  s.read("format", d.format, spec::kFormatChoices);
  s.read("shuffle", d.shuffle);
  s.read("reset_attention_mask", d.reset_attention_mask);
  s.read("reset_position_ids", d.reset_position_ids);
  s.read("eod_mask_loss", d.eod_mask_loss);
  if (s.has("eod_token") && !s.is_null("eod_token")) {
    int eod = 0;
    s.read("eod_token", eod, 0);
    d.eod_token = eod;
  }
}

void read_train(Section s, TrainSpec& t) {
  s.read("seq_len", t.seq_len, 1);
  s.read("micro_batch", t.micro_batch, 1, 1 << 20);
  s.read("global_batch", t.global_batch, 1, 1 << 30);
  s.read("steps", t.steps, 1);
  s.read("eval_every", t.eval_every, 0);
  s.read("eval_batches", t.eval_batches, 1);
  s.read("log_every", t.log_every, 1);
  if (s.has("max_minutes") && !s.is_null("max_minutes")) {
    double minutes = 0;
    s.read("max_minutes", minutes);
    s.reader().check_min(s.path("max_minutes"), minutes, 0, /*strict=*/true);
    t.max_minutes = minutes;
  }
  if (s.has("rampup_batch_size") && !s.is_null("rampup_batch_size")) {
    SpecReader& r = s.reader();
    const YAML::Node n = s.get("rampup_batch_size");
    const std::string path = s.path("rampup_batch_size");
    if (!n.IsSequence() || n.size() != 3)
      r.fail(path, n.Mark(), "expected null or a list [start, increment, samples] (Megatron's "
                             "--rampup-batch-size), got " + spec::describe(n));
    TrainSpec::Rampup ramp;
    ramp.start = static_cast<int>(r.as_int(n[0], path + "[0]", 1, INT32_MAX));
    ramp.increment = static_cast<int>(r.as_int(n[1], path + "[1]", 1, INT32_MAX));
    ramp.samples = r.as_int(n[2], path + "[2]", 1, INT32_MAX);
    t.rampup_batch_size = ramp;
  }
}

void read_optimizer(Section s, OptimizerSpec& o) {
  SpecReader& r = s.reader();
  s.read("name", o.name, spec::kOptimizerChoices);
  s.read("lr", o.lr);
  r.check_min(s.path("lr"), o.lr, 0, true);
  s.read("min_lr", o.min_lr);
  r.check_min(s.path("min_lr"), o.min_lr, 0);
  s.read("warmup_steps", o.warmup_steps, 0);
  s.read("warmup_init_lr", o.warmup_init_lr);
  r.check_min(s.path("warmup_init_lr"), o.warmup_init_lr, 0);
  s.read("schedule", o.schedule, spec::kScheduleChoices);
  s.read("wsd_decay_style", o.wsd_decay_style, spec::kWsdDecayChoices);
  if (s.has("decay_steps") && !s.is_null("decay_steps")) {
    int steps = 0;
    s.read("decay_steps", steps, 1);
    o.decay_steps = steps;
  }
  if (s.has("betas")) {
    const YAML::Node b = s.get("betas");
    const std::string path = s.path("betas");
    if (!b.IsSequence() || b.size() != 2)
      r.fail(path, b.Mark(), "expected a list of two numbers [beta1, beta2], got " + spec::describe(b));
    double* dst[2] = {&o.beta1, &o.beta2};
    for (size_t i = 0; i < 2; ++i) {
      const std::string p = fmt::format("{}[{}]", path, i);
      *dst[i] = r.as_double(b[i], p);
      if (!(*dst[i] >= 0 && *dst[i] < 1))
        r.fail(p, b[i].Mark(), fmt::format("must be in [0, 1), got {}", b[i].Scalar()));
    }
  }
  s.read("eps", o.eps);
  r.check_min(s.path("eps"), o.eps, 0, true);
  s.read("weight_decay", o.weight_decay);
  r.check_min(s.path("weight_decay"), o.weight_decay, 0);
  s.read("grad_clip", o.grad_clip);
  r.check_min(s.path("grad_clip"), o.grad_clip, 0);
}

void read_precision(Section s, PrecisionSpec& p) {
  SpecReader& r = s.reader();
  s.read("compute", p.compute, spec::kComputeChoices);
  if (s.has("loss_scale")) {
    const YAML::Node n = s.get("loss_scale");
    const std::string path = s.path("loss_scale");
    double v = 0;
    if (n.IsScalar() && n.Scalar() == "dynamic") {
      p.dynamic_loss_scale = true;
    } else if (n.IsScalar() && spec::parse_double(n.Scalar(), v) && v > 0 &&
               std::isfinite(static_cast<float>(v)) && static_cast<float>(v) > 0) {
      p.dynamic_loss_scale = false;
      p.loss_scale = v;
    } else {
      // The scale is a float on the device: 1e300 would become inf there.
      r.fail(path, n.Mark(), "expected 'dynamic' or a number > 0 a float holds (up to 3.4e38), got " +
                                 spec::describe(n));
    }
  }
  s.read("fp8_amax_history", p.fp8_amax_history, 1);
  s.read("fp8_margin", p.fp8_margin, 0);
  s.read("fp8_first_last_bf16", p.fp8_first_last_bf16);
  s.read("fp8_weight_cache", p.fp8_weight_cache);
}

void read_parallel(Section s, ParallelSpec& p) {
  SpecReader& r = s.reader();
  s.read("tp", p.tp, 1);
  s.read("pp", p.pp, 1);
  s.read("cp", p.cp, 1);
  s.read("ep", p.ep, 1);
  if (s.has("dp")) {
    const YAML::Node n = s.get("dp");
    if (n.IsScalar() && n.Scalar() == "auto") {
      p.dp = 0;
    } else if (!n.IsScalar() || n.Scalar().find_first_not_of("+-0123456789") != std::string::npos) {
      r.fail(s.path("dp"), n.Mark(), "expected 'auto' or an integer >= 1, got " + spec::describe(n));
    } else {
      s.read("dp", p.dp, 1);
    }
  }
  s.read("zero", p.zero, 0, 3);
  s.read("zero_overlap", p.zero_overlap);
  s.read("sequence_parallel", p.sequence_parallel);
  s.read("pp_schedule", p.pp_schedule, spec::kPipelineChoices);
  s.read("virtual_stages", p.virtual_stages, 1);
  s.read("recompute", p.recompute, spec::kRecomputeChoices);
  // Megatron's --recompute-method block --recompute-num-layers N.
  if (s.has("recompute_num_layers") && !s.is_null("recompute_num_layers"))
    s.read("recompute_num_layers", p.recompute_num_layers, 1, 16384);
  s.read("timeout_s", p.timeout_s);
  r.check_min(s.path("timeout_s"), p.timeout_s, 0, true);
}

void read_checkpoint(Section s, CheckpointSpec& c, const std::string& run_dir) {
  s.read_nullable("dir", c.dir);
  if (c.dir.empty()) c.dir = run_dir + "/checkpoints";
  s.read("every", c.every, 0);
  s.read("keep", c.keep, 1);
  s.read("resume", c.resume);
  s.read("async", c.async);
}

void read_log(Section s, LogSpec& l) {
  SpecReader& r = s.reader();
  s.read("metrics", l.metrics, spec::kMetricsChoices);
  s.read("timers", l.timers);
  s.read("params_norm", l.params_norm);
  if (s.has("profile_steps") && !s.is_null("profile_steps")) {
    const YAML::Node n = s.get("profile_steps");
    const std::string path = s.path("profile_steps");
    if (!n.IsSequence() || n.size() != 2)
      r.fail(path, n.Mark(), "expected null or a list of two steps [first, last], got " +
                                 spec::describe(n));
    l.profile_first = static_cast<int>(r.as_int(n[0], path + "[0]", 1, INT32_MAX));
    l.profile_last = static_cast<int>(r.as_int(n[1], path + "[1]", 1, INT32_MAX));
    if (l.profile_last < l.profile_first)
      r.fail(path, n.Mark(), fmt::format("the last step {} is before the first {}", l.profile_last,
                                         l.profile_first));
  }
  if (s.has("profile_ranks")) {
    const YAML::Node n = s.get("profile_ranks");
    const std::string path = s.path("profile_ranks");
    if (!n.IsSequence())
      r.fail(path, n.Mark(), "expected a list of world ranks such as [0], got " + spec::describe(n));
    if (n.size() == 0)
      r.fail(path, n.Mark(), "expected at least one world rank, such as [0], got an empty list");
    l.profile_ranks.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      const int rank = static_cast<int>(r.as_int(n[i], fmt::format("{}[{}]", path, i), 0, INT32_MAX));
      if (std::find(l.profile_ranks.begin(), l.profile_ranks.end(), rank) != l.profile_ranks.end())
        r.fail(fmt::format("{}[{}]", path, i), n[i].Mark(), fmt::format("rank {} is listed twice", rank));
      l.profile_ranks.push_back(rank);
    }
  }
}

}  // namespace

JobSpec parse_job_spec(const std::string& yaml_text, const std::string& source_name,
                       const std::vector<std::string>& overrides) {
  YAML::Node root = spec::load_yaml_document(yaml_text, source_name);
  SpecReader r(source_name);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap())
    throw InputError(fmt::format("{}: expected a map of sections (run:, model:, data:, ...), got {}",
                                 r.where("", root.Mark()), spec::describe(root)));
  for (const auto& o : overrides) apply_override(root, o, r);
  check_keys(root, spec::key_tree(), "", r);

  JobSpec spec;
  spec.source_path = source_name;
  auto section = [&](const char* name) {
    return Section(r, root[name], name);
  };
  read_run(section("run"), spec.run);
  read_model(section("model"), spec.model);
  read_data(section("data"), spec.data);
  read_train(section("train"), spec.train);
  read_optimizer(section("optimizer"), spec.optimizer);
  read_precision(section("precision"), spec.precision);
  read_parallel(section("parallel"), spec.parallel);
  read_checkpoint(section("checkpoint"), spec.checkpoint, spec.run.dir);
  read_log(section("log"), spec.log);
  spec::check_consistency(spec, r);
  return spec;
}

JobSpec load_job_spec(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(fmt::format("{}: cannot read job spec: {}", path, std::strerror(EISDIR)));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot read job spec: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("{}: cannot read job spec: {}", path, std::strerror(errno)));
  return parse_job_spec(text.str(), path, overrides);
}

}  // namespace trainer::engine
