// SpecReader and Section: the valid-key tree, located typed reads, "did you mean" hints.
#include "engine/config/spec_reader.h"

#include "kernels/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace trainer::engine::spec {

const KeyNode* KeyNode::child(const std::string& key) const {
  for (const auto& c : children)
    if (c.name == key) return &c;
  return nullptr;
}

namespace {

KeyNode leaves(const char* name, std::initializer_list<const char*> keys) {
  KeyNode node{name, {}};
  for (const char* k : keys) node.children.push_back({k, {}});
  return node;
}

KeyNode build_key_tree() {
  KeyNode model = leaves("model", {"family", "n_layer", "d_model", "n_head", "n_kv_head", "head_dim", "d_ff",
                                   "vocab_size", "max_seq_len", "tie_embeddings", "qkv_bias", "qk_norm", "sliding_window", "full_attention_every", "rope_theta",
                                   "norm_eps", "init_std", "init_from"});
  model.children.push_back(leaves("rope_scaling", {"type", "factor", "low_freq_factor",
                                                   "high_freq_factor",
                                                   "original_max_position_embeddings", "beta_fast",
                                                   "beta_slow", "attention_factor", "mscale",
                                                   "mscale_all_dim"}));
  model.children.push_back(leaves("mla", {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                          "qk_rope_head_dim", "v_head_dim"}));
  model.children.push_back(leaves("moe", {"n_experts", "top_k", "n_shared_experts",
                                          "shared_expert_gate", "d_ff_expert",
                                          "every", "first_dense", "balance", "score", "normalize_topk", "topk_scaling_factor",
                                          "n_groups", "top_groups", "aux_loss_coeff", "z_loss_coeff", "seq_aux_loss_coeff",
                                          "bias_update_rate", "capacity_factor", "ep_recv_headroom"}));
  return KeyNode{
      "",
      {leaves("run", {"name", "dir", "seed", "device", "attention"}),
       model,
       leaves("data", {"train", "val", "split", "format", "shuffle", "reset_attention_mask", "reset_position_ids",
                       "eod_mask_loss", "eod_token"}),
       leaves("train", {"seq_len", "micro_batch", "global_batch", "steps", "eval_every",
                        "eval_batches", "log_every", "max_minutes", "rampup_batch_size"}),
       leaves("optimizer", {"name", "lr", "min_lr", "warmup_steps", "warmup_init_lr", "schedule",
                            "decay_steps", "wsd_decay_style", "betas", "eps", "weight_decay",
                            "grad_clip"}),
       leaves("precision", {"compute", "loss_scale", "fp8_amax_history", "fp8_margin",
                            "fp8_first_last_bf16", "fp8_weight_cache"}),
       leaves("parallel", {"tp", "pp", "cp", "ep", "dp", "zero", "zero_overlap", "sequence_parallel",
                           "pp_schedule", "virtual_stages", "recompute", "recompute_num_layers",
                           "timeout_s"}),
       leaves("checkpoint", {"dir", "every", "keep", "resume", "async"}),
       leaves("log", {"metrics", "timers", "params_norm", "profile_steps", "profile_ranks"})}};
}

std::string join(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

bool is_prefix_path(const std::string& prefix, const std::string& path) {
  if (path.size() < prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[';
}

}  // namespace

const KeyNode& key_tree() {
  static const KeyNode tree = build_key_tree();
  return tree;
}

int levenshtein(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(const KeyNode& parent, const std::string& parent_path,
                         const std::string& key) {
  // Close enough to be a typo: at most 2 edits, and fewer than half the key
  // (so "xy" does not suggest "tp").
  const int limit = std::min<int>(2, static_cast<int>(key.size() - 1) / 2 + 1);
  const KeyNode* best = nullptr;
  int best_d = limit + 1;
  for (const auto& c : parent.children) {
    const int d = levenshtein(key, c.name);
    if (d < best_d) best = &c, best_d = d;
  }
  if (best && best_d <= 1) return " (did you mean '" + join(parent_path, best->name) + "'?)";
  // A key put in the wrong section (model.lr, optimizer.steps) beats a two-edit
  // match in its own section (optimizer.eps).
  for (const auto& section : key_tree().children)
    if (section.child(key) && section.name != parent_path)
      return " (did you mean '" + section.name + "." + key + "'?)";
  if (best) return " (did you mean '" + join(parent_path, best->name) + "'?)";
  return "";
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    default: return "nothing";
  }
}

std::string SpecReader::where(const std::string& path, const YAML::Mark& mark) const {
  for (const auto& o : overridden_)
    if (is_prefix_path(o, path)) return "--set";
  if (mark.is_null()) return source_;
  return fmt::format("{}:{}", source_, mark.line + 1);
}

std::string SpecReader::where(const std::string& path) const {
  // A key left at its default has no line; its section's line is the best hint.
  for (std::string p = path; !p.empty();) {
    if (auto it = marks_.find(p); it != marks_.end()) return where(path, it->second);
    const size_t cut = p.find_last_of(".[");
    p = cut == std::string::npos ? std::string() : p.substr(0, cut);
  }
  return where(path, YAML::Mark::null_mark());
}

void SpecReader::fail(const std::string& path, const YAML::Mark& mark,
                      const std::string& reason) const {
  auto it = marks_.find(path);
  throw InputError(
      fmt::format("{}: {}: {}", where(path, it == marks_.end() ? mark : it->second), path, reason));
}

void SpecReader::fail(const std::string& path, const std::string& reason) const {
  throw InputError(fmt::format("{}: {}: {}", where(path), path, reason));
}

std::string SpecReader::scalar_or_fail(const YAML::Node& n, const std::string& path,
                                       const std::string& expected) const {
  if (!n.IsScalar()) fail(path, n.Mark(), "expected " + expected + ", got " + describe(n));
  return n.Scalar();
}

int64_t SpecReader::as_int(const YAML::Node& n, const std::string& path, int64_t min,
                           int64_t max) const {
  const std::string s = scalar_or_fail(n, path, "an integer");
  int64_t v = 0;
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  const char* last = s.data() + s.size();
  auto [end, ec] = std::from_chars(begin, last, v);
  if (begin == last || end != last || (ec != std::errc() && ec != std::errc::result_out_of_range))
    fail(path, n.Mark(), "expected an integer, got '" + s + "'");
  const bool negative = s[0] == '-';
  const bool too_low = ec == std::errc::result_out_of_range ? negative : v < min;
  const bool too_high = ec == std::errc::result_out_of_range ? !negative : v > max;
  if (!too_low && !too_high) return v;
  if (max != INT32_MAX && min != INT32_MIN)
    fail(path, n.Mark(), fmt::format("must be in {}..{}, got {}", min, max, s));
  if (too_low) fail(path, n.Mark(), fmt::format("must be >= {}, got {}", min, s));
  fail(path, n.Mark(), fmt::format("must be <= {}, got {}", max, s));
}

uint64_t SpecReader::as_uint64(const YAML::Node& n, const std::string& path) const {
  const std::string s = scalar_or_fail(n, path, "a non-negative integer");
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    fail(path, n.Mark(), "expected a non-negative integer below 2^64, got '" + s + "'");
  return v;
}

bool parse_double(const std::string& s, double& out) {
  // strtod, not from_chars: it accepts the leading '+' YAML allows; hex floats are refused.
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out);
}

double SpecReader::as_double(const YAML::Node& n, const std::string& path) const {
  const std::string s = scalar_or_fail(n, path, "a number");
  double v = 0;
  if (!parse_double(s, v)) fail(path, n.Mark(), "expected a number, got '" + s + "'");
  return v;
}

bool SpecReader::as_bool(const YAML::Node& n, const std::string& path) const {
  const std::string s = scalar_or_fail(n, path, "true or false");
  bool v = false;
  if (!YAML::convert<bool>::decode(n, v))
    fail(path, n.Mark(), "expected true or false, got '" + s + "'");
  return v;
}

std::string SpecReader::as_string(const YAML::Node& n, const std::string& path) const {
  const std::string s = scalar_or_fail(n, path, "a string");
  if (s.empty()) fail(path, n.Mark(), "expected a non-empty string");
  return s;
}

void SpecReader::check_min(const std::string& path, double value, double min, bool strict) const {
  if (strict ? value > min : value >= min) return;
  fail(path, fmt::format("must be {} {}, got {}", strict ? ">" : ">=", min, value));
}

void SpecReader::check_range(const std::string& path, double value, double lo, double hi) const {
  if (value >= lo && value <= hi) return;
  fail(path, fmt::format("must be in {}..{}, got {}", lo, hi, value));
}

void Section::read(const char* key, int& out, int64_t min, int64_t max) {
  if (present(key)) out = static_cast<int>(r_.as_int(node_[key], path(key), min, max));
}

void Section::read(const char* key, uint64_t& out) {
  if (present(key)) out = r_.as_uint64(node_[key], path(key));
}

void Section::read(const char* key, double& out) {
  if (present(key)) out = r_.as_double(node_[key], path(key));
}

void Section::read(const char* key, bool& out) {
  if (present(key)) out = r_.as_bool(node_[key], path(key));
}

void Section::read(const char* key, std::string& out) {
  if (present(key)) out = r_.as_string(node_[key], path(key));
}

void Section::read_nullable(const char* key, std::string& out) {
  if (!present(key)) return;
  out = node_[key].IsNull() ? std::string() : r_.as_string(node_[key], path(key));
}

}  // namespace trainer::engine::spec
