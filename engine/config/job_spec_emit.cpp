// job_spec_to_yaml / write_resolved_spec / to_string: the resolved spec as YAML,
// every key in the JOB_SPEC.md order, written so that parse_job_spec gives it back.
#include "engine/config/job_spec.h"
#include "engine/config/spec_enums.h"
#include "engine/config/spec_reader.h"
#include "kernels/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <unistd.h>

namespace trainer::engine {
namespace {

// Shortest text that reads back as the same double, always with a '.' so that
// any YAML reader sees a float ("1.0e-05", not "1e-05").
std::string num(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".ni") != std::string::npos) return s;  // has '.', or is nan/inf
  const size_t e = s.find('e');
  return e == std::string::npos ? s + ".0" : s.substr(0, e) + ".0" + s.substr(e);
}

// Plain when it cannot be read as anything but this string, else double-quoted.
std::string str(const std::string& s) {
  static const char* kReserved[] = {"null", "true", "false", "yes", "no", "on", "off", "y", "n", "~"};
  bool plain = !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_' ||
                              s[0] == '.' || s[0] == '/');
  for (char c : s)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./-*", c));
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* w : kReserved) plain = plain && lower != w;
  double ignored;
  plain = plain && !spec::parse_double(s, ignored);
  if (plain) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    else out += c;
  }
  return out + "\"";
}

const char* yes(bool b) { return b ? "true" : "false"; }

std::string sources(const std::vector<DataSource>& list) {
  if (list.empty()) return " []\n";
  bool weighted = false;
  for (const auto& s : list) weighted = weighted || s.weight != 1.0;
  if (list.size() == 1 && !weighted) return fmt::format(" {}\n", str(list[0].path));
  std::string out = "\n";
  for (const auto& s : list) {
    if (weighted) out += fmt::format("    - {{path: {}, weight: {}}}\n", str(s.path), num(s.weight));
    else out += fmt::format("    - {}\n", str(s.path));
  }
  return out;
}

}  // namespace

const char* to_string(Family f) { return spec::name_of(spec::kFamilyChoices, f); }
const char* to_string(ComputeDtype c) { return spec::name_of(spec::kComputeChoices, c); }
const char* to_string(Schedule s) { return spec::name_of(spec::kScheduleChoices, s); }
const char* to_string(WsdDecay d) { return spec::name_of(spec::kWsdDecayChoices, d); }
const char* to_string(DeviceKind d) { return spec::name_of(spec::kDeviceChoices, d); }
const char* to_string(AttentionKind a) { return spec::name_of(spec::kAttentionChoices, a); }
const char* to_string(Balance b) { return spec::name_of(spec::kBalanceChoices, b); }
const char* to_string(RouterScore s) { return spec::name_of(spec::kScoreChoices, s); }
const char* to_string(RopeType t) { return spec::name_of(spec::kRopeTypeChoices, t); }
const char* to_string(DataFormat f) { return spec::name_of(spec::kFormatChoices, f); }
const char* to_string(PipelineSchedule p) { return spec::name_of(spec::kPipelineChoices, p); }
const char* to_string(Recompute r) { return spec::name_of(spec::kRecomputeChoices, r); }

std::string job_spec_to_yaml(const JobSpec& spec) {
  const RunSpec& run = spec.run;
  const ModelSpec& m = spec.model;
  const DataSpec& data = spec.data;
  const TrainSpec& t = spec.train;
  const OptimizerSpec& o = spec.optimizer;
  const PrecisionSpec& pr = spec.precision;
  const ParallelSpec& pa = spec.parallel;
  const CheckpointSpec& ck = spec.checkpoint;
  const LogSpec& lg = spec.log;
  std::string y = "# Resolved job spec: every key, defaults filled in.\n";
  y += fmt::format("run:\n  name: {}\n  dir: {}\n  seed: {}\n  device: {}\n  attention: {}\n",
                   str(run.name), str(run.dir), run.seed, to_string(run.device),
                   to_string(run.attention));
  // gpt2's q/k/v biases come with the family: the spec says so.
  const bool qkv_bias = m.family == Family::gpt2 || m.qkv_bias;
  y += fmt::format(
      "model:\n  family: {}\n  n_layer: {}\n  d_model: {}\n  n_head: {}\n  n_kv_head: {}\n"
      "  head_dim: {}\n  d_ff: {}\n  vocab_size: {}\n  max_seq_len: {}\n  tie_embeddings: {}\n"
      "  qkv_bias: {}\n  qk_norm: {}\n  sliding_window: {}\n  full_attention_every: {}\n"
      "  rope_theta: {}\n  norm_eps: {}\n  init_std: {}\n  init_from: {}\n",
      to_string(m.family), m.n_layer, m.d_model, m.n_head, m.n_kv_head,
      m.head_size > 0 ? std::to_string(m.head_size) : std::string("null"), m.d_ff, m.vocab_size,
      m.max_seq_len, yes(m.tie_embeddings), yes(qkv_bias), yes(m.qk_norm),
      m.sliding_window > 0 ? std::to_string(m.sliding_window) : std::string("null"),
      m.full_attention_every > 0 ? std::to_string(m.full_attention_every) : std::string("null"),
      num(m.rope_theta),
      num(m.norm_eps), num(m.init_std), m.init_from.empty() ? "null" : str(m.init_from));
  if (m.rope_scaling.enabled) {
    const RopeScalingSpec& rs = m.rope_scaling;
    y += fmt::format("  rope_scaling:\n    type: {}\n    factor: {}\n", to_string(rs.type), num(rs.factor));
    if (rs.type == RopeType::llama3)
      y += fmt::format("    low_freq_factor: {}\n    high_freq_factor: {}\n", num(rs.low_freq_factor),
                       num(rs.high_freq_factor));
    if (rs.type != RopeType::linear)
      y += fmt::format("    original_max_position_embeddings: {}\n", rs.original_max_position_embeddings);
    auto opt = [&](const std::optional<double>& v) { return v ? num(*v) : std::string("null"); };
    if (rs.type == RopeType::yarn)
      y += fmt::format("    beta_fast: {}\n    beta_slow: {}\n    attention_factor: {}\n"
                       "    mscale: {}\n    mscale_all_dim: {}\n",
                       num(rs.beta_fast), num(rs.beta_slow), opt(rs.attention_factor),
                       opt(rs.mscale), opt(rs.mscale_all_dim));
  } else {
    y += "  rope_scaling: null\n";
  }
  if (m.moe.enabled) {
    y += fmt::format(
        "  moe:\n    n_experts: {}\n    top_k: {}\n    n_shared_experts: {}\n"
        "    shared_expert_gate: {}\n    d_ff_expert: {}\n"
        "    every: {}\n    first_dense: {}\n    balance: {}\n    score: {}\n    normalize_topk: {}\n"
        "    topk_scaling_factor: {}\n    n_groups: {}\n    top_groups: {}\n"
        "    aux_loss_coeff: {}\n    z_loss_coeff: {}\n    seq_aux_loss_coeff: {}\n"
        "    bias_update_rate: {}\n    capacity_factor: {}\n    ep_recv_headroom: {}\n",
        m.moe.n_experts, m.moe.top_k, m.moe.n_shared_experts, yes(m.moe.shared_expert_gate),
        m.moe.d_ff_expert, m.moe.every,
        m.moe.first_dense, to_string(m.moe.balance), to_string(m.moe.score), yes(m.moe.normalize_topk),
        num(m.moe.topk_scaling_factor), m.moe.n_groups, m.moe.top_groups,
        num(m.moe.aux_loss_coeff), num(m.moe.z_loss_coeff), num(m.moe.seq_aux_loss_coeff),
        num(m.moe.bias_update_rate),
        m.moe.capacity_factor ? num(*m.moe.capacity_factor) : "null", num(m.moe.ep_recv_headroom));
  } else {
    y += "  moe: null\n";
  }
  if (m.mla.enabled)
    y += fmt::format("  mla:\n    q_lora_rank: {}\n    kv_lora_rank: {}\n    qk_nope_head_dim: {}\n"
                     "    qk_rope_head_dim: {}\n    v_head_dim: {}\n",
                     m.mla.q_lora_rank > 0 ? std::to_string(m.mla.q_lora_rank) : std::string("null"),
                     m.mla.kv_lora_rank, m.mla.qk_nope_head_dim, m.mla.qk_rope_head_dim,
                     m.mla.v_head_dim);
  else
    y += "  mla: null\n";
  y += "data:\n  train:" + sources(data.train) + "  val:" + sources(data.val);
  if (data.split.empty()) {
    y += "  split: null\n";
  } else {
    std::string shares;
    for (double v : data.split) shares += (shares.empty() ? "" : ", ") + num(v);
    y += "  split: [" + shares + "]\n";
  }
  y += fmt::format("  format: {}\n  shuffle: {}\n", to_string(data.format), yes(data.shuffle));
  y += fmt::format("  reset_attention_mask: {}\n  reset_position_ids: {}\n  eod_mask_loss: {}\n"
                   "  eod_token: {}\n",
                   yes(data.reset_attention_mask), yes(data.reset_position_ids),
                   yes(data.eod_mask_loss), data.eod_token ? std::to_string(*data.eod_token) : "null");
  y += fmt::format(
      "train:\n  seq_len: {}\n  micro_batch: {}\n  global_batch: {}\n  steps: {}\n"
      "  eval_every: {}\n  eval_batches: {}\n  log_every: {}\n  max_minutes: {}\n"
      "  rampup_batch_size: {}\n",
      t.seq_len, t.micro_batch, t.global_batch, t.steps, t.eval_every, t.eval_batches, t.log_every,
      t.max_minutes ? num(*t.max_minutes) : "null",
      t.rampup_batch_size ? fmt::format("[{}, {}, {}]", t.rampup_batch_size->start,
                                        t.rampup_batch_size->increment, t.rampup_batch_size->samples)
                          : std::string("null"));
  y += fmt::format(
      "optimizer:\n  name: {}\n  lr: {}\n  min_lr: {}\n  warmup_steps: {}\n  warmup_init_lr: {}\n"
      "  schedule: {}\n  decay_steps: {}\n  wsd_decay_style: {}\n  betas: [{}, {}]\n  eps: {}\n"
      "  weight_decay: {}\n  grad_clip: {}\n",
      str(o.name), num(o.lr), num(o.min_lr), o.warmup_steps, num(o.warmup_init_lr), to_string(o.schedule),
      o.decay_steps ? std::to_string(*o.decay_steps) : "null", to_string(o.wsd_decay_style),
      num(o.beta1), num(o.beta2),
      num(o.eps), num(o.weight_decay), num(o.grad_clip));
  y += fmt::format("precision:\n  compute: {}\n  loss_scale: {}\n  fp8_amax_history: {}\n"
                   "  fp8_margin: {}\n  fp8_first_last_bf16: {}\n  fp8_weight_cache: {}\n",
                   to_string(pr.compute), pr.dynamic_loss_scale ? "dynamic" : num(pr.loss_scale),
                   pr.fp8_amax_history, pr.fp8_margin, pr.fp8_first_last_bf16,
                   pr.fp8_weight_cache);
  y += fmt::format(
      "parallel:\n  tp: {}\n  pp: {}\n  cp: {}\n  ep: {}\n  dp: {}\n  zero: {}\n  zero_overlap: {}\n"
      "  sequence_parallel: {}\n  pp_schedule: {}\n  virtual_stages: {}\n  recompute: {}\n"
      "  recompute_num_layers: {}\n  timeout_s: {}\n",
      pa.tp, pa.pp, pa.cp, pa.ep, pa.dp == 0 ? "auto" : std::to_string(pa.dp), pa.zero,
      yes(pa.zero_overlap), yes(pa.sequence_parallel), to_string(pa.pp_schedule), pa.virtual_stages,
      to_string(pa.recompute),
      pa.recompute_num_layers > 0 ? std::to_string(pa.recompute_num_layers) : std::string("null"),
      num(pa.timeout_s));
  y += fmt::format("checkpoint:\n  dir: {}\n  every: {}\n  keep: {}\n  resume: {}\n  async: {}\n",
                   ck.dir.empty() ? "null" : str(ck.dir), ck.every, ck.keep, str(ck.resume),
                   yes(ck.async));
  y += fmt::format("log:\n  metrics: {}\n  timers: {}\n  params_norm: {}\n  profile_steps: {}\n"
                   "  profile_ranks: [{}]\n",
                   str(lg.metrics), yes(lg.timers), yes(lg.params_norm),
                   lg.profile_first ? fmt::format("[{}, {}]", lg.profile_first, lg.profile_last)
                                    : std::string("null"),
                   fmt::join(lg.profile_ranks, ", "));
  return y;
}

void write_resolved_spec(const JobSpec& spec, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Accept the run directory itself as well as the file to write.
  fs::path target = fs::is_directory(path, ec) ? fs::path(path) / "job.yaml" : fs::path(path);
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec)
      throw Error(fmt::format("{}: cannot create directory: {}", target.parent_path().string(),
                              ec.message()));
  }
  const std::string text = job_spec_to_yaml(spec);
  const std::string tmp = target.string() + fmt::format(".tmp.{}", ::getpid());
  auto fail = [&](const char* what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: cannot {} resolved job spec: {}", target.string(), what,
                            std::strerror(err)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create");
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("sync");
  }
  if (::close(fd) != 0) fail("close");
  if (::rename(tmp.c_str(), target.c_str()) != 0) fail("rename");
}

}  // namespace trainer::engine
