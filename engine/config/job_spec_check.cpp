// Cross-field rules of a job spec; each failure blames one key, with its line.
#include "engine/config/job_spec_check.h"

#include <fmt/format.h>

namespace trainer::engine::spec {
namespace {

void check_moe(const ModelSpec& m, const SpecReader& r);

// model.mla: its heads are sized by its own keys, each with its own keys and values.
void check_mla(const ModelSpec& m, const SpecReader& r) {
  if (m.family != Family::llama)
    r.fail("model.mla", "multi-head latent attention is a llama-family layer (RMSNorm, RoPE): it "
                        "needs family: llama");
  if (m.head_size > 0)
    r.fail("model.head_dim", fmt::format("with model.mla the heads are qk_nope_head_dim + "
                                         "qk_rope_head_dim wide (q, k) and v_head_dim (v): leave "
                                         "head_dim null, got {}", m.head_size));
  if (m.n_kv_head != m.n_head)
    r.fail("model.n_kv_head", fmt::format("with model.mla every head has its own keys and values "
                                          "(from the shared latent): must equal model.n_head ({}) "
                                          "or be left out, got {}", m.n_head, m.n_kv_head));
  if (m.qk_norm)
    r.fail("model.qk_norm", "model.mla normalises its latents (q_a_layernorm, kv_a_layernorm), not "
                            "each head: qk_norm must be false");
  if (m.qkv_bias)
    r.fail("model.qkv_bias", "model.mla's projections have no biases: qkv_bias must be false");
}

void check_model(const ModelSpec& m, const SpecReader& r) {
  // Only DeepseekV3Attention scales its softmax by it: on another attention it would half-apply.
  if (m.rope_scaling.mscale_all_dim && !m.mla.enabled)
    r.fail("model.rope_scaling.mscale_all_dim",
           "DeepSeek's YaRN softmax scale, a key of model.mla models only (for another attention "
           "give the attention factor itself as attention_factor)");
  if (m.mla.enabled) {
    check_mla(m, r);
    check_moe(m, r);
    return;
  }
  if (m.head_size == 0 && m.d_model % m.n_head != 0)
    r.fail("model.d_model", fmt::format("must be a multiple of model.n_head ({}), got {} (or give "
                                        "model.head_dim)", m.n_head, m.d_model));
  // GPT-2's fused c_attn and c_proj are d_model wide.
  if (m.family == Family::gpt2 && m.head_size > 0 && m.head_size * m.n_head != m.d_model)
    r.fail("model.head_dim", fmt::format("gpt2's heads span d_model: must be model.d_model / model.n_head "
                                         "({} / {}) or null, got {} (heads of another size need family: "
                                         "llama)", m.d_model, m.n_head, m.head_size));
  if (m.n_head % m.n_kv_head != 0)
    r.fail("model.n_kv_head", fmt::format("must divide model.n_head ({}), got {}", m.n_head,
                                          m.n_kv_head));
  if (m.family == Family::gpt2 && m.n_kv_head != m.n_head)
    r.fail("model.n_kv_head",
           fmt::format("gpt2 has no grouped-query attention: must equal model.n_head ({}), got {} "
                       "(grouped-query attention needs family: llama)",
                       m.n_head, m.n_kv_head));
  // Rotary embeddings rotate pairs of channels.
  if (m.family == Family::llama && m.head_dim() % 2 != 0)
    r.fail(m.head_size > 0 ? "model.head_dim" : "model.n_head",
           m.head_size > 0 ? fmt::format("llama needs an even head dimension for rotary embeddings, "
                                         "got {}", m.head_size)
                           : fmt::format("llama needs an even head dimension for rotary embeddings; "
                                         "model.d_model / model.n_head = {} / {} = {}",
                                         m.d_model, m.n_head, m.head_dim()));
  if (m.family == Family::gpt2 && m.qk_norm)
    r.fail("model.qk_norm", "the q/k norm is an RMSNorm of each head, as llama's norms are "
                            "(qk_norm needs family: llama)");
  if (m.full_attention_every > 0 && m.sliding_window == 0)
    r.fail("model.full_attention_every", "keeps every N-th layer in full attention among sliding-window "
                                         "layers, but model.sliding_window is null");
  if (m.family == Family::gpt2 && m.rope_scaling.enabled)
    r.fail("model.rope_scaling", "gpt2 has learned positions, not rotary embeddings (rope_scaling "
                                 "needs family: llama)");
  check_moe(m, r);
}

void check_moe(const ModelSpec& m, const SpecReader& r) {
  if (!m.moe.enabled) return;
  if (m.moe.top_k > m.moe.n_experts)
    r.fail("model.moe.top_k", fmt::format("must be <= model.moe.n_experts ({}), got {}",
                                          m.moe.n_experts, m.moe.top_k));
  if (m.moe.shared_expert_gate && m.moe.n_shared_experts == 0)
    r.fail("model.moe.shared_expert_gate",
           "gates the shared experts' output, but model.moe.n_shared_experts is 0");
  if (m.moe.n_groups > 1 || m.moe.top_groups > 1) {
    const int G = m.moe.n_groups;
    if (m.moe.n_experts % G != 0 || m.moe.n_experts / G < 2)
      r.fail("model.moe.n_groups",
             fmt::format("must split model.moe.n_experts ({}) into equal groups of 2 or more "
                         "experts (a group is scored by its two best), got {}",
                         m.moe.n_experts, G));
    else if (m.moe.top_groups > G)
      r.fail("model.moe.top_groups",
             fmt::format("must be <= model.moe.n_groups ({}), got {}", G, m.moe.top_groups));
    else if (m.moe.top_k > m.moe.top_groups * (m.moe.n_experts / G))
      r.fail("model.moe.top_k",
             fmt::format("must be <= the {} experts in model.moe.top_groups ({}) groups of {}, got {}",
                         m.moe.top_groups * (m.moe.n_experts / G), m.moe.top_groups,
                         m.moe.n_experts / G, m.moe.top_k));
  }
  if (m.moe.every > m.n_layer)
    r.fail("model.moe.every", fmt::format("must be <= model.n_layer ({}), got {} (no layer would "
                                          "be a MoE layer)", m.n_layer, m.moe.every));
  // The last layer l with (l + 1) % every == 0 must come after the dense ones.
  const int last_moe = m.n_layer / m.moe.every * m.moe.every - 1;
  if (m.moe.every <= m.n_layer && m.moe.first_dense > last_moe)
    r.fail("model.moe.first_dense",
           fmt::format("must be <= {} (the last layer model.moe.every {} makes an MoE layer, of "
                       "model.n_layer {}), got {} (no layer would be a MoE layer)",
                       last_moe, m.moe.every, m.n_layer, m.moe.first_dense));
}

void check_training(const JobSpec& s, const SpecReader& r) {
  const TrainSpec& t = s.train;
  if (t.seq_len > s.model.max_seq_len)
    r.fail("train.seq_len", fmt::format("must be <= model.max_seq_len ({}), got {}",
                                        s.model.max_seq_len, t.seq_len));
  if (t.global_batch % t.micro_batch != 0)
    r.fail("train.global_batch", fmt::format("must be a multiple of train.micro_batch ({}), got {}",
                                             t.micro_batch, t.global_batch));
  if (t.rampup_batch_size) {
    // Megatron's rules (RampupBatchsizeNumMicroBatchesCalculator), and whole
    // micro-batches at every size the ramp takes (the mesh adds dp's factor).
    const TrainSpec::Rampup& ramp = *t.rampup_batch_size;
    if (ramp.start >= t.global_batch)
      r.fail("train.rampup_batch_size", fmt::format("starts at {}, which must be below train.global_batch "
                                                    "({}), the batch it ramps up to",
                                                    ramp.start, t.global_batch));
    else if ((t.global_batch - ramp.start) % ramp.increment != 0)
      r.fail("train.rampup_batch_size", fmt::format("increment {} does not divide train.global_batch {} - "
                                                    "start {} = {}", ramp.increment, t.global_batch,
                                                    ramp.start, t.global_batch - ramp.start));
    else if (ramp.start % t.micro_batch != 0 || ramp.increment % t.micro_batch != 0)
      r.fail("train.rampup_batch_size", fmt::format("start {} and increment {} must be multiples of "
                                                    "train.micro_batch ({})", ramp.start, ramp.increment,
                                                    t.micro_batch));
  }
  if (!s.data.split.empty() && !s.data.val.empty())
    r.fail("data.split", "takes the validation samples from data.train, but data.val is given too "
                         "(give one or the other)");
  if (t.eval_every > 0 && s.data.val.empty() && s.data.split.empty())
    r.fail("data.val", fmt::format("required when train.eval_every > 0 (it is {}); add validation "
                                   "data, a data.split, or set train.eval_every: 0", t.eval_every));
  if (t.eval_every > 0 && s.data.val.empty() && !s.data.split.empty() && s.data.split_val() == 0)
    r.fail("data.split", fmt::format("gives validation no share, but train.eval_every is {} (give it a "
                                     "share or set train.eval_every: 0)", t.eval_every));
  const DataSpec& d = s.data;
  if (d.documents() && !d.eod_token) {
    const char* key = d.reset_attention_mask ? "data.reset_attention_mask"
                      : d.reset_position_ids ? "data.reset_position_ids"
                                             : "data.eod_mask_loss";
    r.fail("data.eod_token", fmt::format("required when {} is true: the id that ends each document "
                                         "in the data (GPT-2's <|endoftext|> is 50256, Llama 3's "
                                         "<|end_of_text|> 128001)", key));
  }
  if (d.eod_token && *d.eod_token >= s.model.vocab_size)
    r.fail("data.eod_token", fmt::format("must be < model.vocab_size ({}), got {}", s.model.vocab_size,
                                         *d.eod_token));
  const OptimizerSpec& o = s.optimizer;
  if (o.min_lr > o.lr)
    r.fail("optimizer.min_lr", fmt::format("must be <= optimizer.lr ({}), got {}", o.lr, o.min_lr));
  if (o.warmup_init_lr > o.lr)
    r.fail("optimizer.warmup_init_lr", fmt::format("must be <= optimizer.lr ({}), the rate warmup "
                                                   "rises to, got {}", o.lr, o.warmup_init_lr));
  if (s.log.profile_first > t.steps)
    r.fail("log.profile_steps", fmt::format("the first step {} is after train.steps ({}): nothing "
                                            "would be profiled", s.log.profile_first, t.steps));
  if (o.schedule == Schedule::wsd && o.decay_steps && *o.decay_steps > t.steps)
    r.fail("optimizer.decay_steps", fmt::format("must be <= train.steps ({}), got {}", t.steps,
                                                *o.decay_steps));
}

void check_parallel(const JobSpec& s, const SpecReader& r) {
  const ParallelSpec& p = s.parallel;
  const bool interleaved = p.pp_schedule == PipelineSchedule::interleaved;
  if (p.virtual_stages > 1 && !interleaved)
    r.fail("parallel.virtual_stages",
           fmt::format("needs parallel.pp_schedule: interleaved, got {} with pp_schedule: 1f1b",
                       p.virtual_stages));
  if (interleaved && p.virtual_stages < 2)
    r.fail("parallel.pp_schedule", "interleaved needs parallel.virtual_stages >= 2, got 1");
  if (p.pp * p.virtual_stages > s.model.n_layer)
    r.fail("parallel.pp",
           fmt::format("every pipeline stage needs a layer: pp * virtual_stages = {} * {} must be <= "
                       "model.n_layer ({})", p.pp, p.virtual_stages, s.model.n_layer));
  if (p.recompute_num_layers > 0 && p.recompute != Recompute::full)
    r.fail("parallel.recompute_num_layers",
           fmt::format("recomputes the first {} blocks of each stage, but parallel.recompute is {} (needs "
                       "full)", p.recompute_num_layers, to_string(p.recompute)));
  if (p.ep > 1 && !s.model.moe.enabled)
    r.fail("parallel.ep", fmt::format("expert parallelism needs a model.moe block, got ep {}", p.ep));
  if (s.model.moe.enabled && s.model.moe.n_experts % p.ep != 0)
    r.fail("parallel.ep", fmt::format("must divide model.moe.n_experts ({}), got {}",
                                      s.model.moe.n_experts, p.ep));
}

}  // namespace

void check_consistency(const JobSpec& spec, const SpecReader& r) {
  check_model(spec.model, r);
  check_training(spec, r);
  check_parallel(spec, r);
}

}  // namespace trainer::engine::spec
