// Bad job specs: each must be refused with one exact line naming the place
// (FILE:LINE or --set), the key path and the reason.
#include "engine/config/job_spec.h"
#include "kernels/error.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace trainer::engine;

namespace {

// Three lines of valid data, so the lines of the key under test are easy to count.
const std::string kData = "data:\n  train: t.bin\n  val: v.bin\n";

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_job_spec(yaml, "job.yaml", overrides);
  } catch (const trainer::InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

struct Bad {
  const char* what;
  std::string yaml;
  std::vector<std::string> overrides;
  std::string message;
};

const std::vector<Bad>& bad_specs() {
  static const std::vector<Bad> specs = {
      {"misspelt key", kData + "model:\n  n_layers: 4\n", {},
       "job.yaml:5: unknown key 'model.n_layers' (did you mean 'model.n_layer'?)"},
      {"unknown key, nothing close", kData + "model:\n  colour: red\n", {},
       "job.yaml:5: unknown key 'model.colour'"},
      {"misspelt section", "modle:\n  n_layer: 4\n" + kData, {},
       "job.yaml:1: unknown key 'modle' (did you mean 'model'?)"},
      {"key in the wrong section", kData + "model:\n  lr: 0.1\n", {},
       "job.yaml:5: unknown key 'model.lr' (did you mean 'optimizer.lr'?)"},
      {"key in the wrong section beats a two-edit match", kData + "optimizer:\n  steps: 5\n", {},
       "job.yaml:5: unknown key 'optimizer.steps' (did you mean 'train.steps'?)"},
      {"two-edit typo", kData + "train:\n  stepz_: 5\n", {},
       "job.yaml:5: unknown key 'train.stepz_' (did you mean 'train.steps'?)"},
      {"negative dp", kData + "parallel:\n  dp: -1\n", {},
       "job.yaml:5: parallel.dp: must be >= 1, got -1"},
      {"document masking without the eod token", kData + "  reset_position_ids: true\n", {},
       "job.yaml:1: data.eod_token: required when data.reset_position_ids is true: the id that ends each "
       "document in the data (GPT-2's <|endoftext|> is 50256, Llama 3's <|end_of_text|> 128001)"},
      {"eod token outside the vocabulary", kData + "  eod_mask_loss: true\n  eod_token: 50257\n", {},
       "job.yaml:5: data.eod_token: must be < model.vocab_size (50257), got 50257"},
      {"document masking flag not a bool", kData, {"data.reset_attention_mask=yes please"},
       "--set: data.reset_attention_mask: expected true or false, got 'yes please'"},
      {"gpt2 without its qkv biases", kData + "model:\n  qkv_bias: false\n", {},
       "job.yaml:5: model.qkv_bias: gpt2 has biases on every projection, c_attn's q, k and v included "
       "(attention without them needs family: llama)"},
      {"q/k norms on gpt2", kData + "model:\n  qk_norm: true\n", {},
       "job.yaml:5: model.qk_norm: the q/k norm is an RMSNorm of each head, as llama's norms are "
       "(qk_norm needs family: llama)"},
      {"sliding window of no keys", kData + "model:\n  sliding_window: 0\n", {},
       "job.yaml:5: model.sliding_window: must be in 1..16777216, got 0 (null: full causal attention)"},
      {"sliding window not a number", kData, {"model.sliding_window=wide"},
       "--set: model.sliding_window: expected an integer, got 'wide'"},
      {"full attention every layer", kData + "model:\n  sliding_window: 8\n  full_attention_every: 1\n", {},
       "job.yaml:6: model.full_attention_every: must be in 2..16384, got 1"},
      {"full-attention layers without a window", kData + "model:\n  full_attention_every: 4\n", {},
       "job.yaml:5: model.full_attention_every: keeps every N-th layer in full attention among "
       "sliding-window layers, but model.sliding_window is null"},
      {"partial recomputation without full", kData + "parallel:\n  recompute_num_layers: 2\n", {},
       "job.yaml:5: parallel.recompute_num_layers: recomputes the first 2 blocks of each stage, but "
       "parallel.recompute is none (needs full)"},
      {"split with separate validation data", kData + "  split: [9, 1]\n", {},
       "job.yaml:4: data.split: takes the validation samples from data.train, but data.val is given too "
       "(give one or the other)"},
      {"split of one share", "data:\n  train: t.bin\n  split: [1]\n", {},
       "job.yaml:3: data.split: expected 2 or 3 shares (train, validation, test) >= 0 with train > 0, as a "
       "list [949, 50, 1] or Megatron's \"949,50,1\", got [1]"},
      {"split share not a number", "data:\n  train: t.bin\n", {"data.split=949,x,1"},
       "--set: data.split: expected 2 or 3 shares (train, validation, test) >= 0 with train > 0, as a "
       "list [949, 50, 1] or Megatron's \"949,50,1\", got '949,x,1'"},
      {"split without a validation share", "data:\n  train: t.bin\n  split: [1, 0]\n", {},
       "job.yaml:3: data.split: gives validation no share, but train.eval_every is 50 (give it a share or "
       "set train.eval_every: 0)"},
      {"rope scaling on gpt2", kData + "model:\n  rope_scaling: {factor: 8}\n", {},
       "job.yaml:5: model.rope_scaling: gpt2 has learned positions, not rotary embeddings "
       "(rope_scaling needs family: llama)"},
      {"rope scaling of another kind", kData + "model:\n  family: llama\n  rope_scaling: {type: ntk}\n", {},
       "job.yaml:6: model.rope_scaling.type: expected one of llama3, linear, yarn, got 'ntk'"},
      {"another type's rope scaling key",
       kData + "model:\n  family: llama\n  rope_scaling: {type: yarn, low_freq_factor: 2}\n", {},
       "job.yaml:6: model.rope_scaling.low_freq_factor: a key of type llama3, not of type yarn"},
      {"yarn key on llama3", kData + "model:\n  family: llama\n  rope_scaling: {beta_fast: 16}\n", {},
       "job.yaml:6: model.rope_scaling.beta_fast: a key of type yarn, not of type llama3"},
      {"linear has no original context",
       kData + "model:\n  family: llama\n  rope_scaling: {type: linear, original_max_position_embeddings: 8}\n", {},
       "job.yaml:6: model.rope_scaling.original_max_position_embeddings: a key of types llama3 and yarn, not of type linear"},
      {"yarn betas out of order",
       kData + "model:\n  family: llama\n  rope_scaling: {type: yarn, beta_fast: 1, beta_slow: 2}\n", {},
       "job.yaml:6: model.rope_scaling.beta_fast: must be above beta_slow (2), got 1"},
      {"yarn attention factor 0",
       kData + "model:\n  family: llama\n  rope_scaling: {type: yarn, attention_factor: 0}\n", {},
       "job.yaml:6: model.rope_scaling.attention_factor: must be > 0, got 0"},
      {"mscale on llama3", kData + "model:\n  family: llama\n  rope_scaling: {mscale: 1}\n", {},
       "job.yaml:6: model.rope_scaling.mscale: a key of type yarn, not of type llama3"},
      {"mscale alone", kData + "model:\n  family: llama\n  rope_scaling: {type: yarn, mscale: 0.7}\n", {},
       "job.yaml:6: model.rope_scaling.mscale: needs mscale_all_dim beside it (YaRN's attention factor "
       "is m(mscale) / m(mscale_all_dim); transformers ignores mscale alone)"},
      {"mscale_all_dim 0", kData + "model:\n  family: llama\n  rope_scaling: {type: yarn, mscale_all_dim: 0}\n",
       {}, "job.yaml:6: model.rope_scaling.mscale_all_dim: must be > 0, got 0"},
      {"mscale_all_dim without mla",
       kData + "model:\n  family: llama\n  rope_scaling: {type: yarn, mscale: 1, mscale_all_dim: 1}\n", {},
       "job.yaml:6: model.rope_scaling.mscale_all_dim: DeepSeek's YaRN softmax scale, a key of model.mla "
       "models only (for another attention give the attention factor itself as attention_factor)"},
      {"rope scaling bands reversed",
       kData + "model:\n  family: llama\n  rope_scaling: {low_freq_factor: 4, high_freq_factor: 2}\n", {},
       "job.yaml:6: model.rope_scaling.high_freq_factor: must be above low_freq_factor (4), got 2"},
      {"misspelt rope scaling key", kData + "model:\n  family: llama\n  rope_scaling: {factr: 8}\n", {},
       "job.yaml:6: unknown key 'model.rope_scaling.factr' (did you mean 'model.rope_scaling.factor'?)"},
      {"misspelt moe key", kData + "model:\n  moe:\n    top_kk: 2\n", {},
       "job.yaml:6: unknown key 'model.moe.top_kk' (did you mean 'model.moe.top_k'?)"},
      {"duplicate key", kData + "train:\n  steps: 1\n  steps: 2\n", {},
       "job.yaml:6: train.steps: duplicate key"},
      {"root is a list", "- a\n- b\n", {},
       "job.yaml:1: expected a map of sections (run:, model:, data:, ...), got a list"},
      {"section is a scalar", kData + "model: 5\n", {},
       "job.yaml:4: model: expected a map of keys, got '5'"},
      {"integer expected", kData + "model:\n  n_layer: four\n", {},
       "job.yaml:5: model.n_layer: expected an integer, got 'four'"},
      {"integer expected, got a float", kData + "train:\n  steps: 2.5\n", {},
       "job.yaml:5: train.steps: expected an integer, got '2.5'"},
      {"integer too large", kData + "train:\n  steps: 99999999999\n", {},
       "job.yaml:5: train.steps: must be <= 2147483647, got 99999999999"},
      {"integer below range", kData + "model:\n  n_layer: 0\n", {},
       "job.yaml:5: model.n_layer: must be in 1..16384, got 0"},
      {"null integer", kData + "model:\n  n_layer:\n", {},
       "job.yaml:5: model.n_layer: expected an integer, got null"},
      {"bad enum", kData + "model:\n  family: gpt3\n", {},
       "job.yaml:5: model.family: expected one of gpt2, llama, got 'gpt3'"},
      {"bad schedule", kData + "optimizer:\n  schedule: cosin\n", {},
       "job.yaml:5: optimizer.schedule: expected one of cosine, wsd, linear, constant, inverse_sqrt, got "
       "'cosin'"},
      {"bad wsd decay style", kData + "optimizer:\n  wsd_decay_style: exp\n", {},
       "job.yaml:5: optimizer.wsd_decay_style: expected one of linear, cosine, exponential, minus_sqrt, "
       "got 'exp'"},
      {"warmup from above lr", kData + "optimizer:\n  lr: 0.001\n  warmup_init_lr: 0.01\n", {},
       "job.yaml:6: optimizer.warmup_init_lr: must be <= optimizer.lr (0.001), the rate warmup rises to, "
       "got 0.01"},
      {"bad metrics", kData + "log:\n  metrics: tensorbord\n", {},
       "job.yaml:5: log.metrics: expected one of jsonl, tensorboard, none, got 'tensorbord'"},
      {"bool expected", "data:\n  train: t.bin\n  val: v.bin\n  shuffle: maybe\n", {},
       "job.yaml:4: data.shuffle: expected true or false, got 'maybe'"},
      {"number expected", kData + "optimizer:\n  lr: fast\n", {},
       "job.yaml:5: optimizer.lr: expected a number, got 'fast'"},
      {"lr must be positive", kData + "optimizer:\n  lr: 0\n", {},
       "job.yaml:5: optimizer.lr: must be > 0, got 0"},
      {"negative weight decay", kData + "optimizer:\n  weight_decay: -0.5\n", {},
       "job.yaml:5: optimizer.weight_decay: must be >= 0, got -0.5"},
      {"betas not a pair", kData + "optimizer:\n  betas: [0.9]\n", {},
       "job.yaml:5: optimizer.betas: expected a list of two numbers [beta1, beta2], got a list"},
      {"beta out of range", kData + "optimizer:\n  betas: [0.9, 1.0]\n", {},
       "job.yaml:5: optimizer.betas[1]: must be in [0, 1), got 1.0"},
      {"bad loss scale", kData + "precision:\n  loss_scale: -1\n", {},
       "job.yaml:5: precision.loss_scale: expected 'dynamic' or a number > 0 a float holds (up to 3.4e38), got '-1'"},
      {"bad dp", kData + "parallel:\n  dp: some\n", {},
       "job.yaml:5: parallel.dp: expected 'auto' or an integer >= 1, got 'some'"},
      {"dp zero", kData + "parallel:\n  dp: 0\n", {}, "job.yaml:5: parallel.dp: must be >= 1, got 0"},
      {"zero stage 4", kData + "parallel:\n  zero: 4\n", {},
       "job.yaml:5: parallel.zero: must be in 0..3, got 4"},
      {"mla on gpt2", kData + "model:\n  mla: {}\n", {},
       "job.yaml:5: model.mla: multi-head latent attention is a llama-family layer (RMSNorm, RoPE): it "
       "needs family: llama"},
      {"mla with a head_dim", kData + "model:\n  family: llama\n  head_dim: 64\n  mla: {}\n", {},
       "job.yaml:6: model.head_dim: with model.mla the heads are qk_nope_head_dim + qk_rope_head_dim "
       "wide (q, k) and v_head_dim (v): leave head_dim null, got 64"},
      {"mla with grouped-query heads", kData + "model:\n  family: llama\n  n_kv_head: 2\n  mla: {}\n", {},
       "job.yaml:6: model.n_kv_head: with model.mla every head has its own keys and values (from the "
       "shared latent): must equal model.n_head (4) or be left out, got 2"},
      {"mla with q/k norms", kData + "model:\n  family: llama\n  qk_norm: true\n  mla: {}\n", {},
       "job.yaml:6: model.qk_norm: model.mla normalises its latents (q_a_layernorm, kv_a_layernorm), "
       "not each head: qk_norm must be false"},
      {"mla with q/k/v biases", kData + "model:\n  family: llama\n  qkv_bias: true\n  mla: {}\n", {},
       "job.yaml:6: model.qkv_bias: model.mla's projections have no biases: qkv_bias must be false"},
      {"mla with an odd rope part", kData + "model:\n  family: llama\n  mla: {qk_rope_head_dim: 5}\n", {},
       "job.yaml:6: model.mla.qk_rope_head_dim: must be even (RoPE turns pairs of dims), got 5"},
      {"mla value heads wider than q/k", kData + "model:\n  family: llama\n  mla: {qk_nope_head_dim: 8, "
       "qk_rope_head_dim: 4, v_head_dim: 16}\n", {},
       "job.yaml:6: model.mla.v_head_dim: must be <= qk_nope_head_dim + qk_rope_head_dim (12), got 16"},
      {"mla key misspelt", kData + "model:\n  family: llama\n  mla: {kv_rank: 4}\n", {},
       "job.yaml:6: unknown key 'model.mla.kv_rank'"},
      {"rampup not a list", kData + "train:\n  rampup_batch_size: 4\n", {},
       "job.yaml:5: train.rampup_batch_size: expected null or a list [start, increment, samples] "
       "(Megatron's --rampup-batch-size), got '4'"},
      {"rampup of two numbers", kData + "train:\n  rampup_batch_size: [4, 4]\n", {},
       "job.yaml:5: train.rampup_batch_size: expected null or a list [start, increment, samples] "
       "(Megatron's --rampup-batch-size), got a list"},
      {"rampup over no samples", kData + "train:\n  rampup_batch_size: [4, 4, 0]\n", {},
       "job.yaml:5: train.rampup_batch_size[2]: must be >= 1, got 0"},
      {"rampup from zero", kData + "train:\n  rampup_batch_size: [0, 4, 100]\n", {},
       "job.yaml:5: train.rampup_batch_size[0]: must be >= 1, got 0"},
      {"rampup starting at the global batch", kData + "train:\n  rampup_batch_size: [16, 4, 100]\n", {},
       "job.yaml:5: train.rampup_batch_size: starts at 16, which must be below train.global_batch (16), "
       "the batch it ramps up to"},
      {"rampup increment not dividing", kData + "train:\n  rampup_batch_size: [4, 8, 100]\n", {},
       "job.yaml:5: train.rampup_batch_size: increment 8 does not divide train.global_batch 16 - start 4 "
       "= 12"},
      {"rampup off the micro-batch", kData + "train:\n  rampup_batch_size: [6, 2, 100]\n", {},
       "job.yaml:5: train.rampup_batch_size: start 6 and increment 2 must be multiples of "
       "train.micro_batch (4)"},
      {"max_minutes 0", kData + "train:\n  max_minutes: 0\n", {},
       "job.yaml:5: train.max_minutes: must be > 0, got 0"},
      {"max_minutes not a number", kData + "train:\n  max_minutes: soon\n", {},
       "job.yaml:5: train.max_minutes: expected a number, got 'soon'"},
      {"capacity factor 0", kData + "model:\n  moe:\n    capacity_factor: 0\n", {},
       "job.yaml:6: model.moe.capacity_factor: must be > 0, got 0"},
      {"every layer dense", kData + "model:\n  n_layer: 4\n  moe:\n    every: 2\n    first_dense: 4\n", {},
       "job.yaml:8: model.moe.first_dense: must be <= 3 (the last layer model.moe.every 2 makes an MoE "
       "layer, of model.n_layer 4), got 4 (no layer would be a MoE layer)"},
      {"negative seq aux loss", kData + "model:\n  moe:\n    seq_aux_loss_coeff: -1e-4\n", {},
       "job.yaml:6: model.moe.seq_aux_loss_coeff: must be >= 0, got -0.0001"},
      {"ep receive headroom below 1", kData + "model:\n  moe:\n    ep_recv_headroom: 0.5\n", {},
       "job.yaml:6: model.moe.ep_recv_headroom: must be >= 1, got 0.5"},
      {"topk scaling 0", kData + "model:\n  moe:\n    topk_scaling_factor: 0\n", {},
       "job.yaml:6: model.moe.topk_scaling_factor: must be > 0, got 0"},
      {"route groups uneven", kData + "model:\n  moe:\n    n_experts: 8\n    n_groups: 3\n", {},
       "job.yaml:7: model.moe.n_groups: must split model.moe.n_experts (8) into equal groups of 2 or "
       "more experts (a group is scored by its two best), got 3"},
      {"route groups of one", kData + "model:\n  moe:\n    n_experts: 8\n    n_groups: 8\n", {},
       "job.yaml:7: model.moe.n_groups: must split model.moe.n_experts (8) into equal groups of 2 or "
       "more experts (a group is scored by its two best), got 8"},
      {"top groups over groups", kData + "model:\n  moe:\n    n_experts: 8\n    n_groups: 2\n    top_groups: 3\n", {},
       "job.yaml:8: model.moe.top_groups: must be <= model.moe.n_groups (2), got 3"},
      {"top_k over the groups' experts",
       kData + "model:\n  moe:\n    n_experts: 8\n    top_k: 3\n    n_groups: 4\n    top_groups: 1\n", {},
       "job.yaml:7: model.moe.top_k: must be <= the 2 experts in model.moe.top_groups (1) groups of 2, got 3"},
      {"router score", kData + "model:\n  moe:\n    score: tanh\n", {},
       "job.yaml:6: model.moe.score: expected one of softmax, sigmoid, got 'tanh'"},
      {"normalize_topk not a bool", kData + "model:\n  moe:\n    normalize_topk: 2\n", {},
       "job.yaml:6: model.moe.normalize_topk: expected true or false, got '2'"},
      {"one expert", kData + "model:\n  moe:\n    n_experts: 1\n", {},
       "job.yaml:6: model.moe.n_experts: must be in 2..65536, got 1"},
      {"n_head does not divide d_model", kData + "model:\n  d_model: 250\n  n_head: 4\n", {},
       "job.yaml:5: model.d_model: must be a multiple of model.n_head (4), got 250 (or give model.head_dim)"},
      {"gpt2 heads narrower than d_model", kData + "model:\n  head_dim: 32\n", {},
       "job.yaml:5: model.head_dim: gpt2's heads span d_model: must be model.d_model / model.n_head "
       "(256 / 4) or null, got 32 (heads of another size need family: llama)"},
      {"odd llama head_dim", kData + "model:\n  family: llama\n  head_dim: 33\n", {},
       "job.yaml:6: model.head_dim: llama needs an even head dimension for rotary embeddings, got 33"},
      {"n_kv_head does not divide n_head",
       kData + "model:\n  family: llama\n  n_head: 4\n  n_kv_head: 3\n", {},
       "job.yaml:7: model.n_kv_head: must divide model.n_head (4), got 3"},
      {"gpt2 with grouped-query attention", kData + "model:\n  n_head: 4\n  n_kv_head: 2\n", {},
       "job.yaml:6: model.n_kv_head: gpt2 has no grouped-query attention: must equal model.n_head "
       "(4), got 2 (grouped-query attention needs family: llama)"},
      {"llama with an odd head dimension",
       kData + "model:\n  family: llama\n  d_model: 12\n  n_head: 4\n", {},
       "job.yaml:7: model.n_head: llama needs an even head dimension for rotary embeddings; "
       "model.d_model / model.n_head = 12 / 4 = 3"},
      {"global batch not a multiple", kData + "train:\n  micro_batch: 4\n  global_batch: 10\n", {},
       "job.yaml:6: train.global_batch: must be a multiple of train.micro_batch (4), got 10"},
      {"seq_len over max_seq_len", kData + "model:\n  max_seq_len: 64\ntrain:\n  seq_len: 128\n", {},
       "job.yaml:7: train.seq_len: must be <= model.max_seq_len (64), got 128"},
      {"seq_len over the default max_seq_len", kData + "train:\n  seq_len: 512\n", {},
       "job.yaml:5: train.seq_len: must be <= model.max_seq_len (256), got 512"},
      {"min_lr over lr", kData + "optimizer:\n  lr: 0.25\n  min_lr: 0.5\n", {},
       "job.yaml:6: optimizer.min_lr: must be <= optimizer.lr (0.25), got 0.5"},
      {"virtual stages without interleaved", kData + "parallel:\n  virtual_stages: 2\n", {},
       "job.yaml:5: parallel.virtual_stages: needs parallel.pp_schedule: interleaved, got 2 with "
       "pp_schedule: 1f1b"},
      {"interleaved with one virtual stage", kData + "parallel:\n  pp_schedule: interleaved\n", {},
       "job.yaml:5: parallel.pp_schedule: interleaved needs parallel.virtual_stages >= 2, got 1"},
      {"more stages than layers", kData + "model:\n  n_layer: 2\nparallel:\n  pp: 4\n", {},
       "job.yaml:7: parallel.pp: every pipeline stage needs a layer: pp * virtual_stages = 4 * 1 "
       "must be <= model.n_layer (2)"},
      {"top_k over n_experts", kData + "model:\n  moe:\n    n_experts: 4\n    top_k: 5\n", {},
       "job.yaml:7: model.moe.top_k: must be <= model.moe.n_experts (4), got 5"},
      {"expert parallelism without experts", kData + "parallel:\n  ep: 2\n", {},
       "job.yaml:5: parallel.ep: expert parallelism needs a model.moe block, got ep 2"},
      {"ep does not divide n_experts", kData + "model:\n  moe: {n_experts: 8}\nparallel:\n  ep: 3\n",
       {}, "job.yaml:7: parallel.ep: must divide model.moe.n_experts (8), got 3"},
      {"wsd decay longer than the run",
       kData + "train:\n  steps: 100\noptimizer:\n  schedule: wsd\n  decay_steps: 200\n", {},
       "job.yaml:8: optimizer.decay_steps: must be <= train.steps (100), got 200"},
      {"profile_steps not a pair", kData + "log:\n  profile_steps: 3\n", {},
       "job.yaml:5: log.profile_steps: expected null or a list of two steps [first, last], got '3'"},
      {"profile_steps from step 0", kData + "log:\n  profile_steps: [0, 2]\n", {},
       "job.yaml:5: log.profile_steps[0]: must be >= 1, got 0"},
      {"profile_steps backwards", kData + "log:\n  profile_steps: [5, 4]\n", {},
       "job.yaml:5: log.profile_steps: the last step 4 is before the first 5"},
      {"profile_steps past the run", kData + "train:\n  steps: 10\nlog:\n  profile_steps: [11, 12]\n",
       {},
       "job.yaml:7: log.profile_steps: the first step 11 is after train.steps (10): nothing would be profiled"},
      {"profile_ranks empty", kData + "log:\n  profile_ranks: []\n", {},
       "job.yaml:5: log.profile_ranks: expected at least one world rank, such as [0], got an empty list"},
      {"profile_ranks negative", kData + "log:\n  profile_ranks: [0, -1]\n", {},
       "job.yaml:5: log.profile_ranks[1]: must be >= 0, got -1"},
      {"profile_ranks twice", kData + "log:\n  profile_ranks: [1, 1]\n", {},
       "job.yaml:5: log.profile_ranks[1]: rank 1 is listed twice"},
      {"missing data.train", "data:\n  val: v.bin\n", {},
       "job.yaml:1: data.train: required: the training data (a path, glob or list)"},
      {"no data section", "model:\n  n_layer: 2\n", {},
       "job.yaml: data.train: required: the training data (a path, glob or list)"},
      {"empty data.train", "data:\n  train: []\n  val: v.bin\n", {},
       "job.yaml:2: data.train: expected at least one path, got a list"},
      {"evaluation without validation data", "data:\n  train: t.bin\n", {},
       "job.yaml:1: data.val: required when train.eval_every > 0 (it is 50); add validation data, "
       "a data.split, or set train.eval_every: 0"},
      {"blend weight zero", "data:\n  train:\n    - {path: a.bin, weight: 0}\n  val: v.bin\n", {},
       "job.yaml:3: data.train[0].weight: must be > 0, got 0"},
      {"blend with a misspelt key",
       "data:\n  train:\n    - path: a.bin\n    - path: b.bin\n      wieght: 2\n  val: v.bin\n", {},
       "job.yaml:5: unknown key 'data.train[1].wieght' (did you mean 'data.train[1].weight'?)"},
      {"blend without a path", "data:\n  train:\n    - weight: 2\n  val: v.bin\n", {},
       "job.yaml:3: data.train[0]: missing 'path'"},
      {"YAML syntax error", "model: [1, 2\n", {}, "job.yaml:2:1: end of sequence flow not found"},
      // yaml-cpp 0.7's LoadAll never returns on these (jbeder/yaml-cpp#1040).
      {"a stray ','", ",\n", {},
       "job.yaml:1:1: unexpected ',' (YAML syntax: no mapping, list or value starts with it)"},
      {"a stray ',' after a comment", "# c\n,  !x\n", {},
       "job.yaml:2:1: unexpected ',' (YAML syntax: no mapping, list or value starts with it)"},
      // yaml-cpp reads NULs as UTF-16/32 and can spend minutes on a binary file.
      {"a NUL byte (a binary file given as the spec)", std::string("run:\0\0\0", 7), {},
       "job.yaml:1:5: byte 0x00 at byte offset 4 is a control character YAML does not allow; a job "
       "spec is YAML text (is this a data file or a checkpoint?)"},
      {"bytes that are not UTF-8", "run:\n  name: caf\xff\n", {},
       "job.yaml:2:12: byte 0xff at byte offset 16 is not UTF-8; a job spec is YAML text (is this a "
       "data file or a checkpoint?)"},
      {"an overlong UTF-8 form", "run:\n  name: \xc0\xaf\n", {},
       "job.yaml:2:9: byte 0xc0 at byte offset 13 is not UTF-8; a job spec is YAML text (is this a "
       "data file or a checkpoint?)"},
      {"a UTF-8 surrogate", "run:\n  name: \xed\xa0\x80\n", {},
       "job.yaml:2:9: byte 0xed at byte offset 13 is not UTF-8; a job spec is YAML text (is this a "
       "data file or a checkpoint?)"},
      {"--set with a stray ','", kData, {"run.name=,"},
       "--set run.name: unexpected ',' (YAML syntax: no mapping, list or value starts with it)"},
      {"--set with a value YAML cannot parse", kData, {"train.steps=[:"},
       "--set train.steps: cannot parse the value: unknown token"},
      {"--set with a second document", kData, {"run.name=a\n---\nb"},
       "--set run.name: a second YAML document (after '---'); a job spec is one document"},
      {"--set with a control character", kData, {"run.name=a\x01"},
       "--set run.name: byte 0x01 at byte offset 1 is a control character YAML does not allow; a "
       "--set value is YAML text"},
      {"--set unknown key", kData, {"model.n_layers=3"},
       "--set: unknown key 'model.n_layers' (did you mean 'model.n_layer'?)"},
      {"--set unknown section", kData, {"optimiser.lr=3"},
       "--set: unknown key 'optimiser' (did you mean 'optimizer'?)"},
      {"--set without a value", kData, {"train.steps"}, "--set train.steps: expected key.path=value"},
      {"--set wrong type", kData, {"train.steps=ten"},
       "--set: train.steps: expected an integer, got 'ten'"},
      {"--set breaks a rule between keys", kData + "train:\n  micro_batch: 4\n",
       {"train.global_batch=10"},
       "--set: train.global_batch: must be a multiple of train.micro_batch (4), got 10"},
      {"--set into a section that is not a map", kData + "model: 5\n", {"model.n_layer=2"},
       "job.yaml:4: model: expected a map of keys, got '5'"},
  };
  return specs;
}

}  // namespace

TEST_CASE("bad job specs are refused with one exact line", "[cpu]") {
  for (const auto& bad : bad_specs()) {
    INFO(bad.what << "\n---\n" << bad.yaml << "---");
    const std::string message = error_of(bad.yaml, bad.overrides);
    CHECK(message == bad.message);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("UTF-8 text with a byte order mark, CRLF and non-ASCII values is read", "[cpu]") {
  const std::string yaml = "\xEF\xBB\xBFrun:\r\n  name: caf\xc3\xa9-\xf0\x9f\x99\x82\t# \xe6\x97\xa5\r\n" + kData;
  const JobSpec spec = parse_job_spec(yaml, "job.yaml");
  CHECK(spec.run.name == "caf\xc3\xa9-\xf0\x9f\x99\x82");
}

TEST_CASE("a missing job file is refused with the system's reason", "[cpu]") {
  const std::string path = std::string(TRAINER_BINARY_DIR) + "/no/such/job.yaml";
  REQUIRE_THROWS_MATCHES(load_job_spec(path), trainer::InputError,
                         Catch::Message(path + ": cannot read job spec: No such file or directory"));
  const std::string dir = std::string(TRAINER_SOURCE_DIR) + "/configs";
  REQUIRE_THROWS_MATCHES(load_job_spec(dir), trainer::InputError,
                         Catch::Message(dir + ": cannot read job spec: Is a directory"));
}

// Each file in test/config/bad/ starts with "# error: <rest of the message>";
// the message must be "<file>:<rest>".
TEST_CASE("every file in test/config/bad is refused with its stated message", "[cpu]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(TRAINER_SOURCE_DIR) / "test/config/bad";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string path = entry.path().string();
    std::ifstream in(path);
    std::string first;
    std::getline(in, first);
    const std::string prefix = "# error: ";
    INFO(path);
    REQUIRE(first.rfind(prefix, 0) == 0);
    std::string message = "(accepted)";
    try {
      load_job_spec(path);
    } catch (const trainer::InputError& e) {
      message = e.what();
    }
    CHECK(message == path + ":" + first.substr(prefix.size()));
    ++count;
  }
  CHECK(count >= 5);
}

// Every edit of a valid job either parses or is refused with InputError: no
// yaml-cpp exception or crash leaks out, and each refusal is one line.
TEST_CASE("mangled variants of a config fail only with InputError", "[cpu]") {
  std::ifstream in(std::string(TRAINER_SOURCE_DIR) + "/configs/moe-tiny.yaml");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() > 20);
  const std::vector<std::string> values = {"", "[", "]", "{a: 1}", "[1, 2]", "null", "-1", "0",
                                           "x", "1.5", "99999999999999999999", "\"\"", "*a", "&a b"};
  int refused = 0, accepted = 0;
  auto attempt = [&](const std::vector<std::string>& variant) {
    std::string text;
    for (const auto& l : variant) text += l + "\n";
    try {
      parse_job_spec(text, "m.yaml");
      ++accepted;
    } catch (const trainer::InputError& e) {
      ++refused;
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
      CHECK(std::string(e.what()).rfind("m.yaml", 0) == 0);
    }
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO("line " << i + 1 << ": " << lines[i]);
    std::vector<std::string> v = lines;
    v.erase(v.begin() + static_cast<long>(i));
    REQUIRE_NOTHROW(attempt(v));
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    for (const auto& value : values) {
      v = lines;
      v[i] = lines[i].substr(0, colon + 1) + " " + value;
      INFO("value " << value);
      REQUIRE_NOTHROW(attempt(v));
    }
    v = lines;
    v[i] = "   " + lines[i];
    REQUIRE_NOTHROW(attempt(v));
  }
  CHECK(refused > 100);
  CHECK(accepted > 10);
}
