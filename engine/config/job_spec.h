// JobSpec: the typed form of a job YAML (see README "Job spec reference").
// One struct per YAML section; field names are the YAML keys. Every field has
// its documented default here; parse_job_spec fills, checks types and ranges,
// and validates cross-field consistency before any work starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainer::engine {

enum class DeviceKind { cpu, cuda, auto_ };
// The CUDA backend's attention: the fused kernels where the shape allows,
// always them (refused where they do not apply), or never.
enum class AttentionKind { auto_, fused, unfused };
enum class Family { gpt2, llama };
enum class Balance { aux_loss, aux_free, none };
enum class RouterScore { softmax, sigmoid };
enum class RopeType { llama3, linear, yarn };
enum class DataFormat { auto_, llmc, megatron };
enum class Schedule { cosine, wsd, linear, constant, inverse_sqrt };
enum class WsdDecay { linear, cosine, exponential, minus_sqrt };
enum class ComputeDtype { fp32, bf16, fp16, fp8 };
enum class PipelineSchedule { one_f_one_b, interleaved };
enum class Recompute { none, selective, full };

struct RunSpec {
  std::string name = "run";
  std::string dir = "";           // default: runs/<name>
  uint64_t seed = 1234;
  DeviceKind device = DeviceKind::auto_;
  AttentionKind attention = AttentionKind::auto_;
  bool operator==(const RunSpec&) const = default;
};

struct MoESpec {
  bool enabled = false;           // true when the model has a moe: block
  int n_experts = 8;              // >= 2
  int top_k = 2;                  // 1..n_experts
  int n_shared_experts = 0;       // >= 0
  bool shared_expert_gate = false;  // the shared experts' output gated per token (Qwen2-MoE's shared_expert_gate)
  int d_ff_expert = 512;          // >= 1
  int every = 1;                  // MoE in layers where (layer + 1) % every == 0
  int first_dense = 0;            // >= 0: the first layers keep a dense MLP (DeepSeek's first_k_dense_replace)
  Balance balance = Balance::aux_loss;
  RouterScore score = RouterScore::softmax;  // the router's expert scores
  bool normalize_topk = true;     // combine weights = the chosen scores / their sum
  double topk_scaling_factor = 1.0;  // > 0: the combine weights are multiplied by it (DeepSeek-V3: 2.5)
  int n_groups = 1;               // divides n_experts: group-limited routing (DeepSeek-V3's n_group); 1 = off
  int top_groups = 1;             // 1..n_groups: the groups a token's experts come from (topk_group)
  double aux_loss_coeff = 0.01;   // >= 0
  double z_loss_coeff = 0.0;      // >= 0: router z-loss weight (0 = off)
  double seq_aux_loss_coeff = 0.0;  // >= 0: sequence-wise balance loss weight (0 = off)
  double bias_update_rate = 1e-3; // >= 0: aux_free expert-bias step per optimizer step
  std::optional<double> capacity_factor;  // null = dropless; else > 0
  double ep_recv_headroom = 2.0;  // >= 1: dropless ep's expert rows, x the balanced load
  bool operator==(const MoESpec&) const = default;
};

// model.rope_scaling (llama): a scaling of RoPE's frequencies, as Hugging
// Face's rope_scaling {rope_type: llama3 | linear | yarn, ...}; disabled = plain RoPE.
struct RopeScalingSpec {
  bool enabled = false;                      // true when the model has a rope_scaling: block
  RopeType type = RopeType::llama3;
  double factor = 8.0;                       // >= 1
  double low_freq_factor = 1.0;              // llama3: > 0
  double high_freq_factor = 4.0;             // llama3: > low_freq_factor
  int original_max_position_embeddings = 8192;  // llama3, yarn: >= 1
  double beta_fast = 32.0;                   // yarn: > beta_slow
  double beta_slow = 1.0;                    // yarn: > 0
  std::optional<double> attention_factor;    // yarn: > 0; null = 0.1 ln(factor) + 1
  // yarn, DeepSeek's (> 0 or null): the default attention_factor becomes
  // m(mscale) / m(mscale_all_dim), m(x) = 0.1 x ln(factor) + 1, and model.mla's
  // softmax scale is multiplied by m(mscale_all_dim)^2.
  std::optional<double> mscale, mscale_all_dim;
  bool operator==(const RopeScalingSpec&) const = default;
};

// model.mla (llama): DeepSeek-V2/V3's multi-head latent attention. Keys and
// values come from one low-rank latent per token (kv_lora_rank wide, plus a
// RoPE part every head shares); queries from their own latent (q_lora_rank,
// 0 = a plain q projection). Defaults are DeepSeek-V3's.
struct MlaSpec {
  bool enabled = false;       // true when the model has an mla: block
  int q_lora_rank = 1536;     // YAML null = 0: q_proj straight from the hidden state
  int kv_lora_rank = 512;     // >= 1
  int qk_nope_head_dim = 128; // >= 1: each q/k head's part without RoPE
  int qk_rope_head_dim = 64;  // even: each q/k head's RoPE part (k's shared by every head)
  int v_head_dim = 128;       // 1 .. qk_nope_head_dim + qk_rope_head_dim
  bool operator==(const MlaSpec&) const = default;
};

struct ModelSpec {
  Family family = Family::gpt2;
  int n_layer = 4;                // >= 1
  int d_model = 256;              // >= 1, multiple of n_head
  int n_head = 4;                 // >= 1
  int n_kv_head = 0;              // 0 in YAML-less default = n_head; must divide n_head; gpt2: == n_head
  int head_size = 0;              // YAML head_dim; 0 (null) = d_model / n_head
  int d_ff = 1024;                // >= 1
  int vocab_size = 50257;         // >= 2
  int max_seq_len = 256;          // >= 1
  bool tie_embeddings = true;     // default true for gpt2, false for llama
  bool qkv_bias = false;          // llama: biases on q, k, v (Qwen2); gpt2 has them regardless
  bool qk_norm = false;           // llama: RMSNorm of each q and k head before RoPE (Qwen3)
  int sliding_window = 0;         // YAML null = 0: full causal; W >= 1: each query sees its last W keys
  int full_attention_every = 0;   // YAML null = 0: every layer windowed; N >= 2: layers N, 2N, ... full
  double rope_theta = 10000.0;    // > 0
  RopeScalingSpec rope_scaling;   // llama only
  double norm_eps = 1e-5;         // > 0
  double init_std = 0.02;         // > 0
  std::string init_from = "";     // empty = random init
  MoESpec moe;
  MlaSpec mla;
  int head_dim() const { return head_size > 0 ? head_size : d_model / n_head; }
  bool operator==(const ModelSpec&) const = default;
};

// One entry of data.train / data.val: a file, prefix or glob, and its blend weight.
struct DataSource {
  std::string path;
  double weight = 1.0;            // > 0
  bool operator==(const DataSource&) const = default;
};

struct DataSpec {
  std::vector<DataSource> train;  // required: at least one
  std::vector<DataSource> val;    // optional
  // Megatron's --split: empty = none; else the train, validation (and
  // held-out test) shares of every data.train source's samples, in order.
  std::vector<double> split;
  double split_val() const { return split.size() > 1 ? split[1] : 0.0; }
  DataFormat format = DataFormat::auto_;
  bool shuffle = true;
  // Documents packed into one sequence, each ending with eod_token (Megatron's
  // --reset-attention-mask, --reset-position-ids, --eod-mask-loss): attention
  // stays within a document, positions restart at each document, the token
  // after an end of document is not predicted from it.
  bool reset_attention_mask = false;
  bool reset_position_ids = false;
  bool eod_mask_loss = false;
  std::optional<int> eod_token;  // required when any of the three is true; < model.vocab_size
  bool documents() const { return reset_attention_mask || reset_position_ids || eod_mask_loss; }
  bool operator==(const DataSpec&) const = default;
};

struct TrainSpec {
  int seq_len = 256;              // 1..model.max_seq_len
  int micro_batch = 4;            // >= 1
  int global_batch = 16;          // multiple of micro_batch (and of micro_batch * dp, checked with the mesh)
  int steps = 200;                // >= 1
  int eval_every = 50;            // >= 0; 0 = never
  int eval_batches = 10;          // >= 1
  int log_every = 1;              // >= 1
  // > 0: once a step ends this many minutes after the trainer started, every
  // rank stops after it, saves and exits 0; null = no budget.
  std::optional<double> max_minutes;
  // Megatron's --rampup-batch-size START INCREMENT SAMPLES: the global batch
  // starts at `start` and grows by `increment` in even steps over the first
  // `samples` training samples, then stays at global_batch (engine/batch_schedule.h).
  struct Rampup {
    int start = 0;          // 1..global_batch - 1, a multiple of micro_batch
    int increment = 0;      // >= 1, divides global_batch - start; a multiple of micro_batch
    int64_t samples = 0;    // >= 1
    bool operator==(const Rampup&) const = default;
  };
  std::optional<Rampup> rampup_batch_size;
  bool operator==(const TrainSpec&) const = default;
};

struct OptimizerSpec {
  std::string name = "adamw";     // only adamw
  double lr = 6e-4;               // > 0
  double min_lr = 6e-5;           // 0..lr
  int warmup_steps = 20;          // >= 0
  double warmup_init_lr = 0.0;    // 0..lr: where warmup starts (Megatron's --lr-warmup-init)
  Schedule schedule = Schedule::cosine;
  std::optional<int> decay_steps; // wsd only: length of the final decay (default 20% of steps)
  WsdDecay wsd_decay_style = WsdDecay::linear;  // wsd only: the final decay's shape
  double beta1 = 0.9;             // YAML: betas: [beta1, beta2], each in [0, 1)
  double beta2 = 0.95;
  double eps = 1e-8;              // > 0
  double weight_decay = 0.1;      // >= 0
  double grad_clip = 1.0;         // >= 0; 0 disables
  bool operator==(const OptimizerSpec&) const = default;
};

struct PrecisionSpec {
  ComputeDtype compute = ComputeDtype::fp32;
  bool dynamic_loss_scale = true; // YAML loss_scale: dynamic
  double loss_scale = 65536.0;    // YAML loss_scale: <number> (static) or initial dynamic scale
  int fp8_amax_history = 1024;    // >= 1
  int fp8_margin = 0;             // >= 0
  bool fp8_first_last_bf16 = true;  // fp8: first and last transformer layers stay bf16
  bool fp8_weight_cache = true;     // fp8 on the GPU: weights' codes kept for the step
  bool operator==(const PrecisionSpec&) const = default;
};

struct ParallelSpec {
  int tp = 1, pp = 1, cp = 1, ep = 1;  // each >= 1
  int dp = 0;                     // 0 = auto (YAML "auto"): world / (tp * pp * cp)
  int zero = 1;                   // 0..3
  // ZeRO 2/3 on a dp-only mesh: two block regions, so a block's collectives
  // overlap the next block's compute on GPUs (engine::zero_double_buffers).
  bool zero_overlap = true;
  bool sequence_parallel = false;
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;
  int virtual_stages = 1;         // >= 1; > 1 only with interleaved
  Recompute recompute = Recompute::none;
  int recompute_num_layers = 0;   // YAML null = 0: every block; N >= 1: the first N of each chunk
  double timeout_s = 600.0;       // > 0: collective watchdog
  bool operator==(const ParallelSpec&) const = default;
};

struct CheckpointSpec {
  std::string dir = "";           // default: <run.dir>/checkpoints
  int every = 0;                  // >= 0; 0 = only at the end and on SIGTERM
  int keep = 3;                   // >= 1
  std::string resume = "auto";    // auto | never | <path>
  bool async = false;             // write shards in the background from a host snapshot
  bool operator==(const CheckpointSpec&) const = default;
};

struct LogSpec {
  std::string metrics = "jsonl";  // jsonl | tensorboard (metrics.jsonl and an event file) | none
  bool timers = false;            // per-phase step times, min/max over ranks (engine/step_timers.h)
  bool params_norm = false;       // the L2 norm of all parameters after each step (--log-params-norm)
  // Nsight Systems' capture range (engine/profile_window.h): steps
  // [profile_first, profile_last] (0 = off) on the world ranks profile_ranks.
  int profile_first = 0, profile_last = 0;
  std::vector<int> profile_ranks{0};
  bool operator==(const LogSpec&) const = default;
};

struct JobSpec {
  RunSpec run;
  ModelSpec model;
  DataSpec data;
  TrainSpec train;
  OptimizerSpec optimizer;
  PrecisionSpec precision;
  ParallelSpec parallel;
  CheckpointSpec checkpoint;
  LogSpec log;
  std::string source_path;        // the YAML file it came from
  bool operator==(const JobSpec&) const = default;
};

// Reads, overrides (each "key.path=value", YAML syntax for the value), fills
// defaults, checks and validates. Throws InputError with one line naming the
// file (and line where known), the key path and what was expected.
JobSpec load_job_spec(const std::string& path, const std::vector<std::string>& overrides = {});
JobSpec parse_job_spec(const std::string& yaml_text, const std::string& source_name,
                       const std::vector<std::string>& overrides = {});

// The fully resolved spec as YAML (every key, defaults filled); parse_job_spec
// of this text gives back an equal spec.
std::string job_spec_to_yaml(const JobSpec& spec);

// Writes job_spec_to_yaml to <run.dir>/job.yaml atomically (temp file + rename).
void write_resolved_spec(const JobSpec& spec, const std::string& path);

const char* to_string(Family f);
const char* to_string(ComputeDtype c);
const char* to_string(Schedule s);
const char* to_string(WsdDecay d);
const char* to_string(DeviceKind d);
const char* to_string(AttentionKind a);
const char* to_string(Balance b);
const char* to_string(RouterScore s);
const char* to_string(RopeType t);
const char* to_string(DataFormat f);
const char* to_string(PipelineSchedule p);
const char* to_string(Recompute r);

}  // namespace trainer::engine
