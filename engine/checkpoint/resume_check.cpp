#include "engine/checkpoint/resume_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace trainer::engine::checkpoint {

namespace {

// Appends "KEY is A in the checkpoint, B in this job" when the two differ.
template <class T>
void differ(std::vector<std::string>& out, const char* key, const T& saved, const T& job) {
  if (!(saved == job)) out.push_back(fmt::format("{} is {} in the checkpoint, {} in this job", key, saved, job));
}

std::string describe(const MlaSpec& m) {
  if (!m.enabled) return "null";
  return fmt::format("{{q_lora_rank {}, kv_lora_rank {}, qk_nope_head_dim {}, qk_rope_head_dim {}, "
                     "v_head_dim {}}}", m.q_lora_rank > 0 ? std::to_string(m.q_lora_rank) : "null",
                     m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim);
}

std::string double_or_null(const std::optional<double>& v) { return v ? fmt::format("{}", *v) : "null"; }

std::string describe(const RopeScalingSpec& r) {
  if (!r.enabled) return "null";
  if (r.type == RopeType::linear) return fmt::format("{{type linear, factor {}}}", r.factor);
  if (r.type == RopeType::yarn)
    return fmt::format("{{type yarn, factor {}, original_max_position_embeddings {}, beta_fast {}, "
                       "beta_slow {}, attention_factor {}{}}}",
                       r.factor, r.original_max_position_embeddings, r.beta_fast, r.beta_slow,
                       double_or_null(r.attention_factor),
                       r.mscale || r.mscale_all_dim
                           ? fmt::format(", mscale {}, mscale_all_dim {}", double_or_null(r.mscale),
                                         double_or_null(r.mscale_all_dim))
                           : std::string());
  return fmt::format("{{factor {}, low_freq_factor {}, high_freq_factor {}, "
                     "original_max_position_embeddings {}}}",
                     r.factor, r.low_freq_factor, r.high_freq_factor,
                     r.original_max_position_embeddings);
}

std::string describe(const std::vector<DataSource>& sources) {
  std::string s;
  for (const DataSource& d : sources)
    s += fmt::format("{}{}{}", s.empty() ? "" : ", ", d.path,
                     d.weight == 1.0 ? std::string() : fmt::format(" (weight {})", d.weight));
  return s;
}

}  // namespace

std::vector<std::string> model_differences(const ModelSpec& saved, const ModelSpec& job,
                                           bool tensors_only) {
  std::vector<std::string> out;
  differ(out, "model.family", std::string(to_string(saved.family)), std::string(to_string(job.family)));
  differ(out, "model.n_layer", saved.n_layer, job.n_layer);
  differ(out, "model.d_model", saved.d_model, job.d_model);
  differ(out, "model.n_head", saved.n_head, job.n_head);
  differ(out, "model.n_kv_head", saved.n_kv_head, job.n_kv_head);
  differ(out, "model.head_dim", saved.head_dim(), job.head_dim());
  differ(out, "model.d_ff", saved.d_ff, job.d_ff);
  differ(out, "model.vocab_size", saved.vocab_size, job.vocab_size);
  if (job.family == Family::gpt2) differ(out, "model.max_seq_len", saved.max_seq_len, job.max_seq_len);
  differ(out, "model.tie_embeddings", saved.tie_embeddings, job.tie_embeddings);
  differ(out, "model.qkv_bias", saved.qkv_bias, job.qkv_bias);
  differ(out, "model.qk_norm", saved.qk_norm, job.qk_norm);
  differ(out, "model.mla", describe(saved.mla), describe(job.mla));
  if (!tensors_only) {
    differ(out, "model.rope_theta", saved.rope_theta, job.rope_theta);
    differ(out, "model.rope_scaling", describe(saved.rope_scaling), describe(job.rope_scaling));
    differ(out, "model.norm_eps", saved.norm_eps, job.norm_eps);
    // 0 is the YAML's null in both keys.
    auto or_null = [](int v) { return v > 0 ? std::to_string(v) : std::string("null"); };
    differ(out, "model.sliding_window", or_null(saved.sliding_window), or_null(job.sliding_window));
    differ(out, "model.full_attention_every", or_null(saved.full_attention_every),
           or_null(job.full_attention_every));
  }
  const MoESpec &a = saved.moe, &b = job.moe;
  if (a.enabled != b.enabled) {
    out.push_back(fmt::format("model.moe is {} in the checkpoint, {} in this job",
                              a.enabled ? "set" : "absent", b.enabled ? "set" : "absent"));
    return out;
  }
  if (!a.enabled) return out;
  differ(out, "model.moe.n_experts", a.n_experts, b.n_experts);
  if (!tensors_only) {
    differ(out, "model.moe.top_k", a.top_k, b.top_k);
    differ(out, "model.moe.score", std::string(to_string(a.score)), std::string(to_string(b.score)));
    differ(out, "model.moe.normalize_topk", a.normalize_topk, b.normalize_topk);
    differ(out, "model.moe.topk_scaling_factor", a.topk_scaling_factor, b.topk_scaling_factor);
    differ(out, "model.moe.n_groups", a.n_groups, b.n_groups);
    differ(out, "model.moe.top_groups", a.top_groups, b.top_groups);
  }
  differ(out, "model.moe.n_shared_experts", a.n_shared_experts, b.n_shared_experts);
  differ(out, "model.moe.shared_expert_gate", a.shared_expert_gate, b.shared_expert_gate);
  differ(out, "model.moe.d_ff_expert", a.d_ff_expert, b.d_ff_expert);
  differ(out, "model.moe.every", a.every, b.every);
  differ(out, "model.moe.first_dense", a.first_dense, b.first_dense);
  // aux_free routes by a learned bias the other rules do not have.
  differ(out, "model.moe.balance", a.balance == Balance::aux_free, b.balance == Balance::aux_free);
  return out;
}

std::vector<std::string> data_stream_changes(const JobSpec& saved, const JobSpec& job) {
  std::vector<std::string> out;
  auto note = [&](const char* key, const std::string& was, const std::string& now, const char* what) {
    if (was != now) out.push_back(fmt::format("{} was {} in the checkpoint, {} now: {}", key, was, now, what));
  };
  note("train.global_batch", std::to_string(saved.train.global_batch),
       std::to_string(job.train.global_batch), "the run continues after the samples the checkpoint consumed");
  auto ramp = [](const TrainSpec& t) {
    return t.rampup_batch_size ? fmt::format("[{}, {}, {}]", t.rampup_batch_size->start,
                                             t.rampup_batch_size->increment, t.rampup_batch_size->samples)
                               : std::string("null");
  };
  note("train.rampup_batch_size", ramp(saved.train), ramp(job.train),
       "each step's batch follows the new ramp from the samples the checkpoint consumed");
  note("train.seq_len", std::to_string(saved.train.seq_len), std::to_string(job.train.seq_len),
       "the data is cut into samples of the new length, counted from the checkpoint's sample count");
  note("run.seed", std::to_string(saved.run.seed), std::to_string(job.run.seed),
       "the sample order is a new one");
  note("data.shuffle", saved.data.shuffle ? "true" : "false", job.data.shuffle ? "true" : "false",
       "the sample order is a new one");
  note("data.train", describe(saved.data.train), describe(job.data.train),
       "the run continues at the checkpoint's sample count in the new data");
  auto shares = [](const std::vector<double>& s) {
    return s.empty() ? std::string("null") : fmt::format("[{}]", fmt::join(s, ", "));
  };
  note("data.split", shares(saved.data.split), shares(job.data.split),
       "the training part is another, its samples counted from the checkpoint's sample count");
  return out;
}

}  // namespace trainer::engine::checkpoint
