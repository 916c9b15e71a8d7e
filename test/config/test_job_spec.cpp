// Job spec: defaults, data-source forms, nullable keys, overrides, round trip
// through job_spec_to_yaml, the atomic resolved-spec write, and every configs/ file.
#include "engine/config/job_spec.h"
#include "kernels/error.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace trainer::engine;
namespace fs = std::filesystem;

namespace {

const std::string kData = "data:\n  train: t.bin\n  val: v.bin\n";

JobSpec parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return parse_job_spec(yaml, "job.yaml", overrides);
}

JobSpec round_trip(const JobSpec& spec) {
  return parse_job_spec(job_spec_to_yaml(spec), spec.source_path);
}

std::vector<fs::path> config_files() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(TRAINER_SOURCE_DIR) / "configs"))
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("a minimal spec gets every documented default", "[cpu]") {
  const JobSpec spec = parse(kData);
  // The expected spec is the struct defaults plus the rules that depend on other keys.
  JobSpec expected;
  expected.source_path = "job.yaml";
  expected.data.train = {{"t.bin", 1.0}};
  expected.data.val = {{"v.bin", 1.0}};
  expected.model.n_kv_head = expected.model.n_head;
  expected.run.dir = "runs/run";
  expected.checkpoint.dir = "runs/run/checkpoints";
  CHECK(spec == expected);

  CHECK(spec.model.family == Family::gpt2);
  CHECK(spec.model.tie_embeddings);
  CHECK(!spec.model.moe.enabled);
  CHECK(spec.parallel.dp == 0);
  CHECK(spec.parallel.zero == 1);
  CHECK(spec.precision.dynamic_loss_scale);
  CHECK(!spec.optimizer.decay_steps);
  CHECK(spec.model.init_from.empty());
}

TEST_CASE("defaults that depend on other keys", "[cpu]") {
  SECTION("llama unties embeddings, and n_kv_head follows n_head") {
    const JobSpec s = parse(kData + "model:\n  family: llama\n  n_head: 8\n");
    CHECK(!s.model.tie_embeddings);
    CHECK(s.model.n_kv_head == 8);
  }
  SECTION("explicit tie_embeddings wins") {
    CHECK(parse(kData + "model:\n  family: llama\n  tie_embeddings: true\n").model.tie_embeddings);
    CHECK(!parse(kData + "model:\n  tie_embeddings: false\n").model.tie_embeddings);
  }
  SECTION("qkv_bias: gpt2's come with its family, llama's (Qwen2) are asked for") {
    CHECK(!parse(kData + "model:\n  family: llama\n").model.qkv_bias);
    CHECK(parse(kData + "model:\n  family: llama\n  qkv_bias: true\n").model.qkv_bias);
    CHECK(parse(kData + "model:\n  qkv_bias: true\n") == parse(kData));
    const std::string y = job_spec_to_yaml(parse(kData));
    CHECK(y.find("  qkv_bias: true\n") != std::string::npos);  // what gpt2 computes
    CHECK(round_trip(parse(kData)) == parse(kData));
  }
  SECTION("run.dir and checkpoint.dir follow run.name") {
    const JobSpec s = parse(kData + "run:\n  name: exp7\n");
    CHECK(s.run.dir == "runs/exp7");
    CHECK(s.checkpoint.dir == "runs/exp7/checkpoints");
    const JobSpec t = parse(kData + "run:\n  name: exp7\n  dir: /scratch/e7\ncheckpoint:\n  dir: null\n");
    CHECK(t.checkpoint.dir == "/scratch/e7/checkpoints");
    CHECK(parse(kData + "checkpoint:\n  dir: /ckpt\n").checkpoint.dir == "/ckpt");
  }
  SECTION("a moe block turns MoE on with its defaults; moe: null leaves it off") {
    const JobSpec s = parse(kData + "model:\n  moe: {}\n");
    MoESpec expected;
    expected.enabled = true;
    CHECK(s.model.moe == expected);
    CHECK(!s.model.moe.capacity_factor);
    CHECK(!parse(kData + "model:\n  moe: null\n").model.moe.enabled);
  }
  SECTION("an mla block turns multi-head latent attention on with DeepSeek-V3's sizes") {
    const JobSpec s = parse(kData + "model:\n  family: llama\n  mla: {}\n");
    MlaSpec expected;
    expected.enabled = true;
    CHECK(s.model.mla == expected);
    CHECK(s.model.mla.q_lora_rank == 1536);
    CHECK(round_trip(s) == s);
    const JobSpec t = parse(kData + "model:\n  family: llama\n  mla: {q_lora_rank: null, kv_lora_rank: 64, "
                                    "qk_nope_head_dim: 16, qk_rope_head_dim: 8, v_head_dim: 12}\n");
    CHECK(t.model.mla.q_lora_rank == 0);
    CHECK(t.model.mla.kv_lora_rank == 64);
    CHECK(t.model.mla.v_head_dim == 12);
    CHECK(round_trip(t) == t);
    CHECK(!parse(kData + "model:\n  family: llama\n  mla: null\n").model.mla.enabled);
  }
  SECTION("empty sections are allowed") {
    CHECK(parse(kData + "log:\nrun:\n") == parse(kData));
  }
}

TEST_CASE("every key is read into its field", "[cpu]") {
  const JobSpec s = parse(R"(run: {name: x, dir: d, seed: 18446744073709551615, device: cuda}
model:
  family: llama
  n_layer: 3
  d_model: 96
  n_head: 6
  n_kv_head: 2
  head_dim: 32
  d_ff: 200
  vocab_size: 1000
  max_seq_len: 128
  tie_embeddings: true
  qkv_bias: true
  qk_norm: true
  sliding_window: 4096
  full_attention_every: 6
  rope_theta: 500000.0
  rope_scaling: {type: llama3, factor: 32, low_freq_factor: 2, high_freq_factor: 8,
                 original_max_position_embeddings: 4096}
  norm_eps: 1.0e-6
  init_std: 0.01
  init_from: hf/model.safetensors
  moe: {n_experts: 16, top_k: 4, n_shared_experts: 1, d_ff_expert: 64, every: 2,
        first_dense: 1, balance: aux_free, score: sigmoid, normalize_topk: false, topk_scaling_factor: 2.5,
        n_groups: 4, top_groups: 2,
        aux_loss_coeff: 0.001, z_loss_coeff: 0.002, seq_aux_loss_coeff: 0.0001, bias_update_rate: 0.005,
        capacity_factor: 1.25, ep_recv_headroom: 3.5}
data: {train: a.bin, val: [b.bin, c.bin], format: megatron, shuffle: false}
train: {seq_len: 100, micro_batch: 3, global_batch: 12, steps: 7, eval_every: 0, eval_batches: 2, log_every: 5,
        max_minutes: 90.5, rampup_batch_size: [3, 3, 1000]}
optimizer: {name: adamw, lr: 0.002, min_lr: 0, warmup_steps: 0, warmup_init_lr: 0.001, schedule: wsd,
            decay_steps: 3, wsd_decay_style: minus_sqrt, betas: [0.8, 0.99], eps: 1.0e-6,
            weight_decay: 0, grad_clip: 0}
precision: {compute: fp16, loss_scale: 1024, fp8_amax_history: 16, fp8_margin: 1}
parallel: {tp: 2, pp: 3, cp: 4, ep: 8, dp: 5, zero: 3, sequence_parallel: true,
           pp_schedule: interleaved, virtual_stages: 1, recompute: full, recompute_num_layers: 2,
           timeout_s: 30}
checkpoint: {dir: ck, every: 5, keep: 1, resume: never}
log: {metrics: none, timers: true, profile_steps: [3, 5], profile_ranks: [2, 0]}
)",
                          {"parallel.virtual_stages=1", "parallel.pp_schedule=1f1b"});
  CHECK(s.run.name == "x");
  CHECK(s.run.dir == "d");
  CHECK(s.run.seed == 18446744073709551615ull);
  CHECK(s.run.device == DeviceKind::cuda);
  CHECK(s.model.family == Family::llama);
  CHECK(s.model.n_layer == 3);
  CHECK(s.model.d_model == 96);
  CHECK(s.model.n_head == 6);
  CHECK(s.model.n_kv_head == 2);
  CHECK(s.model.head_size == 32);
  CHECK(s.model.head_dim() == 32);  // not d_model / n_head = 16
  CHECK(s.model.d_ff == 200);
  CHECK(s.model.vocab_size == 1000);
  CHECK(s.model.max_seq_len == 128);
  CHECK(s.model.tie_embeddings);
  CHECK(s.model.qkv_bias);
  CHECK(s.model.qk_norm);
  CHECK(s.model.sliding_window == 4096);
  CHECK(s.model.full_attention_every == 6);
  CHECK(s.model.rope_theta == 500000.0);
  CHECK(s.model.rope_scaling.enabled);
  CHECK(s.model.rope_scaling.factor == 32.0);
  CHECK(s.model.rope_scaling.low_freq_factor == 2.0);
  CHECK(s.model.rope_scaling.high_freq_factor == 8.0);
  CHECK(s.model.rope_scaling.original_max_position_embeddings == 4096);
  CHECK(s.model.norm_eps == 1e-6);
  CHECK(s.model.init_std == 0.01);
  CHECK(s.model.init_from == "hf/model.safetensors");
  CHECK(s.model.moe.enabled);
  CHECK(s.model.moe.n_experts == 16);
  CHECK(s.model.moe.top_k == 4);
  CHECK(s.model.moe.n_shared_experts == 1);
  CHECK(s.model.moe.d_ff_expert == 64);
  CHECK(s.model.moe.every == 2);
  CHECK(s.model.moe.balance == Balance::aux_free);
  CHECK(s.model.moe.score == RouterScore::sigmoid);
  CHECK(!s.model.moe.normalize_topk);
  CHECK(s.model.moe.first_dense == 1);
  CHECK(s.model.moe.topk_scaling_factor == 2.5);
  CHECK(s.model.moe.n_groups == 4);
  CHECK(s.model.moe.top_groups == 2);
  CHECK(s.model.moe.aux_loss_coeff == 0.001);
  CHECK(s.model.moe.z_loss_coeff == 0.002);
  CHECK(s.model.moe.seq_aux_loss_coeff == 0.0001);
  CHECK(s.model.moe.bias_update_rate == 0.005);
  CHECK(s.model.moe.capacity_factor == 1.25);
  CHECK(s.model.moe.ep_recv_headroom == 3.5);
  CHECK(s.data.train == std::vector<DataSource>{{"a.bin", 1.0}});
  CHECK(s.data.val == std::vector<DataSource>{{"b.bin", 1.0}, {"c.bin", 1.0}});
  CHECK(s.data.format == DataFormat::megatron);
  CHECK(!s.data.shuffle);
  CHECK(s.train.seq_len == 100);
  CHECK(s.train.micro_batch == 3);
  CHECK(s.train.global_batch == 12);
  CHECK(s.train.steps == 7);
  CHECK(s.train.eval_every == 0);
  CHECK(s.train.eval_batches == 2);
  CHECK(s.train.log_every == 5);
  CHECK(s.train.max_minutes == 90.5);
  CHECK(s.train.rampup_batch_size == TrainSpec::Rampup{3, 3, 1000});
  CHECK(s.optimizer.lr == 0.002);
  CHECK(s.optimizer.min_lr == 0);
  CHECK(s.optimizer.warmup_steps == 0);
  CHECK(s.optimizer.schedule == Schedule::wsd);
  CHECK(s.optimizer.decay_steps == 3);
  CHECK(s.optimizer.warmup_init_lr == 0.001);
  CHECK(s.optimizer.wsd_decay_style == WsdDecay::minus_sqrt);
  CHECK(s.optimizer.beta1 == 0.8);
  CHECK(s.optimizer.beta2 == 0.99);
  CHECK(s.optimizer.eps == 1e-6);
  CHECK(s.optimizer.weight_decay == 0);
  CHECK(s.optimizer.grad_clip == 0);
  CHECK(s.precision.compute == ComputeDtype::fp16);
  CHECK(!s.precision.dynamic_loss_scale);
  CHECK(s.precision.loss_scale == 1024);
  CHECK(s.precision.fp8_amax_history == 16);
  CHECK(s.precision.fp8_margin == 1);
  CHECK(s.parallel.tp == 2);
  CHECK(s.parallel.pp == 3);
  CHECK(s.parallel.cp == 4);
  CHECK(s.parallel.ep == 8);
  CHECK(s.parallel.dp == 5);
  CHECK(s.parallel.zero == 3);
  CHECK(s.parallel.sequence_parallel);
  CHECK(s.parallel.pp_schedule == PipelineSchedule::one_f_one_b);
  CHECK(s.parallel.virtual_stages == 1);
  CHECK(s.parallel.recompute == Recompute::full);
  CHECK(s.parallel.recompute_num_layers == 2);
  CHECK(s.parallel.timeout_s == 30);
  CHECK(s.checkpoint.dir == "ck");
  CHECK(s.checkpoint.every == 5);
  CHECK(s.checkpoint.keep == 1);
  CHECK(s.checkpoint.resume == "never");
  CHECK(s.log.metrics == "none");
  CHECK(s.log.timers);
  CHECK(s.log.profile_first == 3);
  CHECK(s.log.profile_last == 5);
  CHECK(s.log.profile_ranks == std::vector<int>{2, 0});
  CHECK(round_trip(s) == s);
}

TEST_CASE("data.train accepts a path, a list, and a weighted blend", "[cpu]") {
  const std::string val = "  val: v.bin\n";
  CHECK(parse("data:\n  train: data/x/train_*.bin\n" + val).data.train ==
        std::vector<DataSource>{{"data/x/train_*.bin", 1.0}});
  CHECK(parse("data:\n  train: [a.bin, b.bin]\n" + val).data.train ==
        std::vector<DataSource>{{"a.bin", 1.0}, {"b.bin", 1.0}});
  CHECK(parse("data:\n  train:\n    - {path: a.bin, weight: 0.7}\n    - path: b*.bin\n" + val)
            .data.train == std::vector<DataSource>{{"a.bin", 0.7}, {"b*.bin", 1.0}});
  CHECK(parse("data:\n  train: {path: a.bin, weight: 2}\n" + val).data.train ==
        std::vector<DataSource>{{"a.bin", 2.0}});
  CHECK(parse("data:\n  train: [a.bin, {path: b.bin, weight: 3}]\n" + val).data.train ==
        std::vector<DataSource>{{"a.bin", 1.0}, {"b.bin", 3.0}});
  CHECK(parse("data:\n  train: a.bin\n  val: null\ntrain:\n  eval_every: 0\n").data.val.empty());
}

TEST_CASE("data.split takes a list or Megatron's comma string, and round-trips", "[cpu]") {
  const JobSpec list = parse("data:\n  train: a.bin\n  split: [949, 50, 1]\n");
  CHECK(list.data.split == std::vector<double>{949, 50, 1});
  CHECK(list.data.split_val() == 50);
  const JobSpec text = parse("data:\n  train: a.bin\n  split: 969,30,1\n");
  CHECK(text.data.split == std::vector<double>{969, 30, 1});
  CHECK(parse("data:\n  train: a.bin\n  split: \"0.9, 0.1\"\n").data.split == std::vector<double>{0.9, 0.1});
  CHECK(round_trip(list) == list);
  CHECK(job_spec_to_yaml(list).find("  split: [949.0, 50.0, 1.0]\n") != std::string::npos);
  CHECK(job_spec_to_yaml(parse(kData)).find("  split: null\n") != std::string::npos);
  // No evaluation needs no validation share.
  CHECK(parse("data:\n  train: a.bin\n  split: [1, 0]\ntrain:\n  eval_every: 0\n").data.split_val() == 0);
}

TEST_CASE("dp, loss_scale and the nullable keys", "[cpu]") {
  CHECK(parse(kData + "parallel:\n  dp: auto\n").parallel.dp == 0);
  CHECK(parse(kData + "parallel:\n  dp: 4\n").parallel.dp == 4);
  const JobSpec dyn = parse(kData + "precision:\n  loss_scale: dynamic\n");
  CHECK(dyn.precision.dynamic_loss_scale);
  const JobSpec fixed = parse(kData + "precision:\n  loss_scale: 128.0\n");
  CHECK(!fixed.precision.dynamic_loss_scale);
  CHECK(fixed.precision.loss_scale == 128.0);
  CHECK(!parse(kData + "model:\n  moe:\n    capacity_factor: null\n").model.moe.capacity_factor);
  CHECK(parse(kData + "model:\n  moe:\n    capacity_factor: 1.5\n").model.moe.capacity_factor == 1.5);
  CHECK(!parse(kData + "optimizer:\n  decay_steps: null\n").optimizer.decay_steps);
  CHECK(parse(kData + "model:\n  init_from: null\n").model.init_from.empty());
  CHECK(parse(kData + "optimizer:\n  schedule: wsd\n  decay_steps: 200\n").optimizer.decay_steps ==
        200);
}

TEST_CASE("command-line overrides (--set) are applied before checking", "[cpu]") {
  const std::string yaml = kData + "train:\n  steps: 100\nparallel:\n  dp: 2\n";
  CHECK(parse(yaml, {"train.steps=10"}).train.steps == 10);
  CHECK(parse(yaml, {"parallel.dp=auto"}).parallel.dp == 0);
  CHECK(parse(yaml, {"data.train=[a.bin,b.bin]"}).data.train ==
        std::vector<DataSource>{{"a.bin", 1.0}, {"b.bin", 1.0}});
  // A section the file does not have, and a later --set winning over an earlier one.
  CHECK(parse(yaml, {"optimizer.lr=0.5", "optimizer.lr=0.25"}).optimizer.lr == 0.25);
  // Creating and removing the moe block.
  const JobSpec moe = parse(yaml, {"model.moe.n_experts=4"});
  CHECK(moe.model.moe.enabled);
  CHECK(moe.model.moe.n_experts == 4);
  CHECK(!parse(kData + "model:\n  moe: {n_experts: 4}\n", {"model.moe=null"}).model.moe.enabled);
  // A value only valid after an override: seq_len above the file's max_seq_len.
  CHECK(parse(kData + "model:\n  max_seq_len: 64\n", {"model.max_seq_len=512", "train.seq_len=512"})
            .train.seq_len == 512);
  // The value is YAML: a quoted string stays a string, '=' inside the value is kept.
  CHECK(parse(yaml, {"run.name=\"a=b\""}).run.name == "a=b");
  CHECK(parse(yaml, {"run.name=123"}).run.name == "123");
}

TEST_CASE("job_spec_to_yaml round-trips", "[cpu]") {
  SECTION("defaults") {
    const JobSpec s = parse(kData);
    CHECK(round_trip(s) == s);
  }
  SECTION("blends, odd strings, static loss scale, null and non-null optionals") {
    const JobSpec s = parse(R"(run: {name: "my run: 2", seed: 0}
model: {init_from: "null", moe: {capacity_factor: 1.0e-3}}
data:
  train: [{path: "a b.bin", weight: 0.1}, {path: 123.bin, weight: 3}, {path: "true", weight: 1}]
  val: ["quote\"d.bin"]
optimizer: {schedule: wsd, decay_steps: 5, lr: 3.0e-4, min_lr: 1.0e-7, eps: 1.0e-12}
precision: {loss_scale: 0.5}
checkpoint: {resume: "/x/y z"}
)");
    CHECK(s.model.init_from == "null");
    CHECK(s.data.train[2].path == "true");
    const JobSpec back = round_trip(s);
    CHECK(back == s);
    CHECK(job_spec_to_yaml(back) == job_spec_to_yaml(s));
  }
  SECTION("each kind of RoPE scaling with its own keys") {
    for (const char* rs : {"{type: linear, factor: 4}",
                           "{type: yarn, factor: 4, original_max_position_embeddings: 32768}",
                           "{type: yarn, factor: 8, original_max_position_embeddings: 4096, beta_fast: 16, "
                           "beta_slow: 2, attention_factor: 1.25}"}) {
      INFO(rs);
      const JobSpec s = parse(kData + std::string("model: {family: llama, rope_scaling: ") + rs + "}\n");
      CHECK(s.model.rope_scaling.enabled);
      CHECK(round_trip(s) == s);
    }
    const JobSpec y = parse(kData + std::string("model: {family: llama, rope_scaling: {type: yarn, factor: 8, "
                                                "beta_fast: 16, beta_slow: 2, attention_factor: 1.25}}\n"));
    CHECK(y.model.rope_scaling.type == RopeType::yarn);
    CHECK(y.model.rope_scaling.beta_fast == 16.0);
    CHECK(y.model.rope_scaling.beta_slow == 2.0);
    CHECK(y.model.rope_scaling.attention_factor == 1.25);
    // DeepSeek-V2-Lite's pair, on an MLA model.
    const JobSpec d = parse(kData + std::string("model: {family: llama, mla: {q_lora_rank: null}, rope_scaling: "
                                                "{type: yarn, factor: 40, original_max_position_embeddings: 4096, "
                                                "mscale: 0.707, mscale_all_dim: 0.707}}\n"));
    CHECK(d.model.rope_scaling.mscale == 0.707);
    CHECK(d.model.rope_scaling.mscale_all_dim == 0.707);
    CHECK_FALSE(d.model.rope_scaling.attention_factor.has_value());
    CHECK(round_trip(d) == d);
  }
  SECTION("a spec built in code") {
    JobSpec s = parse(kData);
    s.optimizer.lr = 0.1 + 0.2;  // not exactly representable in short decimal
    s.model.moe.enabled = true;
    s.model.moe.capacity_factor = 1.0 / 3.0;
    s.data.val.clear();
    s.train.eval_every = 0;
    s.parallel.dp = 16;
    s.log.metrics = "tensorboard";
    s.data.reset_attention_mask = true;
    s.data.eod_mask_loss = true;
    s.data.eod_token = 50256;
    CHECK(round_trip(s) == s);
  }
}

TEST_CASE("job_spec_to_yaml writes every key in the documented order", "[cpu]") {
  const std::string y = job_spec_to_yaml(parse(kData));
  size_t at = 0;
  for (const char* key :
       {"run:", "name:", "dir:", "seed:", "device:", "model:", "family:", "n_layer:", "d_model:",
        "n_head:", "n_kv_head:", "head_dim:", "d_ff:", "vocab_size:", "max_seq_len:", "tie_embeddings:",
        "qkv_bias:", "qk_norm:", "sliding_window:", "full_attention_every:", "rope_theta:", "norm_eps:", "init_std:", "init_from:", "rope_scaling:", "moe:", "data:", "train:", "val:",
        "split:", "format:", "shuffle:", "reset_attention_mask:", "reset_position_ids:", "eod_mask_loss:",
        "eod_token:", "train:", "seq_len:", "micro_batch:", "global_batch:", "steps:",
        "eval_every:", "eval_batches:", "log_every:", "optimizer:", "name:", "lr:", "min_lr:",
        "warmup_steps:", "schedule:", "decay_steps:", "betas:", "eps:", "weight_decay:",
        "grad_clip:", "precision:", "compute:", "loss_scale:", "fp8_amax_history:", "fp8_margin:",
        "fp8_first_last_bf16:", "fp8_weight_cache:", "parallel:", "tp:", "pp:", "cp:", "ep:", "dp:", "zero:", "sequence_parallel:",
        "pp_schedule:", "virtual_stages:", "recompute:", "recompute_num_layers:", "timeout_s:", "checkpoint:", "dir:",
        "every:", "keep:", "resume:", "log:", "metrics:", "timers:", "profile_steps:",
        "profile_ranks:"}) {
    INFO(key);
    const size_t found = y.find(key, at);
    REQUIRE(found != std::string::npos);
    at = found + 1;
  }
  CHECK(y.find("  dp: auto\n") != std::string::npos);
  CHECK(y.find("  loss_scale: dynamic\n") != std::string::npos);
  CHECK(y.find("  decay_steps: null\n") != std::string::npos);
  CHECK(y.find("  profile_steps: null\n  profile_ranks: [0]\n") != std::string::npos);
  CHECK(y.find("  betas: [0.9, 0.95]\n") != std::string::npos);
  CHECK(y.find("  norm_eps: 1.0e-05\n") != std::string::npos);
  CHECK(y.find("  head_dim: null\n") != std::string::npos);  // d_model / n_head
}

TEST_CASE("write_resolved_spec writes job.yaml atomically", "[cpu]") {
  const fs::path dir = fs::path(TRAINER_BINARY_DIR) / "test_config_tmp" / "run";
  fs::remove_all(dir.parent_path());
  JobSpec s = parse(kData);
  write_resolved_spec(s, (dir / "job.yaml").string());
  std::ifstream in(dir / "job.yaml");
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == job_spec_to_yaml(s));
  // Given the run directory, it writes job.yaml inside it, replacing the old one.
  s.train.steps = 7;
  write_resolved_spec(s, dir.string());
  CHECK(load_job_spec((dir / "job.yaml").string()).train.steps == 7);
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  CHECK(files == 1);  // no temporary file left behind
  fs::remove_all(dir.parent_path());
}

TEST_CASE("every file in configs/ loads and round-trips", "[cpu]") {
  const auto files = config_files();
  CHECK(files.size() >= 16);
  for (const auto& f : files) {
    INFO(f.string());
    JobSpec s;
    REQUIRE_NOTHROW(s = load_job_spec(f.string()));
    CHECK(s.run.name == f.stem().string());
    CHECK(round_trip(s) == s);
  }
}

TEST_CASE("configs/ hold the shapes they are named for", "[cpu]") {
  const fs::path dir = fs::path(TRAINER_SOURCE_DIR) / "configs";
  auto load = [&](const char* name) { return load_job_spec((dir / name).string()); };
  const JobSpec tiny = load("tiny-gpt2.yaml");
  CHECK(tiny.model.n_layer == 2);
  CHECK(tiny.model.d_model == 64);
  CHECK(tiny.model.n_head == 4);
  CHECK(tiny.model.vocab_size == 50257);
  CHECK(tiny.train.seq_len == 64);
  CHECK(tiny.train.global_batch == 8);
  CHECK(tiny.train.steps == 100);
  const JobSpec llama = load("tiny-llama.yaml");
  CHECK(llama.model.family == Family::llama);
  CHECK(llama.model.n_kv_head == 2);
  CHECK(llama.model.d_ff == 172);
  const JobSpec bench = load("gpt2-small-bench.yaml");
  CHECK(bench.model.n_layer == 4);
  CHECK(bench.train.seq_len == 256);
  CHECK(bench.train.global_batch == 4);
  const JobSpec quick = load("default.yaml");
  CHECK(quick.train.global_batch == 16);
  CHECK(quick.train.steps == 200);
  CHECK(quick.train.eval_every == 50);
  // GPT-2 124M has 12 layers of width 768 (Radford et al. 2019).
  const JobSpec g124 = load("gpt2-124m.yaml");
  CHECK(g124.model.n_layer == 12);
  CHECK(g124.model.d_model == 768);
  const JobSpec mixtral = load("mixtral-8x7b.yaml");
  CHECK(mixtral.model.moe.enabled);
  CHECK(mixtral.model.moe.n_experts == 8);
  CHECK(mixtral.model.moe.top_k == 2);
  CHECK(load("moe-tiny.yaml").model.moe.n_experts == 8);
  // Qwen2.5 0.5B: 24 layers of width 896, 14 / 2 heads, q/k/v biases, tied.
  const JobSpec qwen2 = load("qwen2-0.5b.yaml");
  CHECK(qwen2.model.qkv_bias);
  CHECK(qwen2.model.tie_embeddings);
  CHECK(qwen2.model.n_layer == 24);
  CHECK(qwen2.model.d_model == 896);
  // Qwen3 1.7B: 28 layers of width 2048, 16 / 8 heads of 128, q/k norms, tied.
  const JobSpec qwen3 = load("qwen3-1.7b.yaml");
  CHECK(qwen3.model.qk_norm);
  CHECK(!qwen3.model.qkv_bias);
  CHECK(qwen3.model.head_dim() == 128);
  // Qwen3 0.6B: 16 heads of 128 over a width of 1024.
  const JobSpec small = load("qwen3-0.6b.yaml");
  CHECK(small.model.d_model == 1024);
  CHECK(small.model.head_dim() == 128);
  // Qwen3-30B-A3B: Qwen3's attention, 128 experts of 768, top-8 renormalised.
  const JobSpec a3b = load("qwen3-30b-a3b.yaml");
  CHECK(a3b.model.qk_norm);
  CHECK(a3b.model.moe.n_experts == 128);
  CHECK(a3b.model.moe.top_k == 8);
  CHECK(a3b.model.moe.score == RouterScore::softmax);
  CHECK(a3b.model.moe.normalize_topk);
}
