// JobSpec -> ModelConfig.
#include "engine/model_from_spec.h"

#include <fmt/format.h>

#include "kernels/error.h"
#include "kernels/op_scratch.h"

namespace trainer::engine {

void apply_device(model::ModelConfig& cfg, const JobSpec& spec, Device device) {
  cfg.fused_attention = spec.run.attention != AttentionKind::unfused;
  if (spec.run.attention == AttentionKind::fused && device == Device::cuda) {
    // Checked on the whole sequence and every head: tp and cp only shrink it.
    const int64_t D = cfg.head_dim();
    TRAINER_INPUT_CHECK(
        flash_attention_shape_applies(cfg.act_dtype, spec.train.micro_batch, spec.train.seq_len,
                                      spec.train.seq_len, cfg.n_head, cfg.n_kv_head, D),
        "{}: run.attention: fused, but the fused kernels take bf16 or fp16 attention "
        "(precision.compute bf16, fp16 or fp8) with a head dim that is a multiple of 16 from {} "
        "to {}; this job has {} attention and head dim {} (auto uses them where they apply)",
        spec.source_path, kFlashMinHeadDim, kFlashMaxHeadDim, dtype_name(cfg.act_dtype), D);
  }
  cfg.fp8_pad_rows = cfg.fp8 && device == Device::cuda;
  cfg.fp8_cache_weights =
      cfg.fp8_pad_rows && spec.parallel.zero != 3 && spec.precision.fp8_weight_cache;
}

std::string attention_options(const ModelSpec& m) {
  std::string s;
  if (m.head_size > 0) s += fmt::format(" of {}", m.head_size);  // "16 heads (8 kv) of 128"
  if (m.family == Family::llama && m.qkv_bias) s += ", q/k/v biases";
  if (m.qk_norm) s += ", q/k norms";
  if (const MlaSpec& a = m.mla; a.enabled)  // ", MLA (q latent 1536, kv latent 512, q/k 128+64, v 128)"
    s += fmt::format(", MLA ({}kv latent {}, q/k {}+{}, v {})",
                     a.q_lora_rank > 0 ? fmt::format("q latent {}, ", a.q_lora_rank) : std::string(),
                     a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim);
  if (m.sliding_window > 0)
    s += m.full_attention_every > 0
             ? fmt::format(", sliding window {} (layers {}, {}, ... in full)", m.sliding_window,
                           m.full_attention_every, 2 * m.full_attention_every)
             : fmt::format(", sliding window {}", m.sliding_window);
  if (const RopeScalingSpec& r = m.rope_scaling; r.enabled)  // ", yarn RoPE x4 over 32768 positions"
    s += r.type == RopeType::linear
             ? fmt::format(", linear RoPE x{}", r.factor)
             : fmt::format(", {} RoPE x{} over {} positions", to_string(r.type), r.factor,
                           r.original_max_position_embeddings);
  return s;
}

std::string moe_options(const MoESpec& e) {
  std::string s = fmt::format("{} experts of {}", e.n_experts, e.d_ff_expert);
  if (e.n_shared_experts > 0)
    s += fmt::format(" (+{} shared{})", e.n_shared_experts, e.shared_expert_gate ? ", gated" : "");
  s += fmt::format(", top-{} by {}{}", e.top_k, e.score == RouterScore::sigmoid ? "sigmoid" : "softmax",
                   e.normalize_topk ? ", renormalised" : ", not renormalised");
  if (e.topk_scaling_factor != 1.0) s += fmt::format(" x{}", e.topk_scaling_factor);
  if (e.n_groups > 1) s += fmt::format(" within the best {} of {} groups", e.top_groups, e.n_groups);
  s += e.every == 1 ? std::string(", in every layer") : fmt::format(", in every {} layers", e.every);
  if (e.first_dense > 0) s += fmt::format(" after {} dense", e.first_dense);
  return s;
}

model::ModelConfig model_config(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  model::ModelConfig c;
  c.family = m.family == Family::llama ? model::Family::llama : model::Family::gpt2;
  c.n_layer = m.n_layer;
  c.d_model = m.d_model;
  c.n_head = m.n_head;
  c.n_kv_head = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  c.head_size = m.head_size;
  if (m.mla.enabled) {
    c.mla = {.enabled = true,
             .q_lora_rank = m.mla.q_lora_rank,
             .kv_lora_rank = m.mla.kv_lora_rank,
             .qk_nope = m.mla.qk_nope_head_dim,
             .qk_rope = m.mla.qk_rope_head_dim,
             .v_dim = m.mla.v_head_dim};
    c.head_size = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim;
    c.n_kv_head = m.n_head;
  }
  c.d_ff = m.d_ff;
  c.vocab_size = m.vocab_size;
  c.max_seq_len = m.max_seq_len;
  c.tie_embeddings = m.tie_embeddings;
  c.qkv_bias = m.qkv_bias;
  c.qk_norm = m.qk_norm;
  c.sliding_window = m.sliding_window;
  c.full_attention_every = m.full_attention_every;
  c.rope_theta = static_cast<float>(m.rope_theta);
  const RopeScalingSpec& rs = m.rope_scaling;
  if (rs.enabled && rs.type == RopeType::yarn)
    c.rope_scaling = yarn_scaling(rs.factor, rs.original_max_position_embeddings, rs.beta_fast,
                                  rs.beta_slow, rs.attention_factor.value_or(0.0),
                                  m.mla.enabled ? m.mla.qk_rope_head_dim : m.head_dim(),
                                  m.rope_theta, rs.mscale.value_or(0.0),
                                  rs.mscale_all_dim.value_or(0.0));
  else if (rs.enabled)
    c.rope_scaling = {.factor = rs.factor,
                      .low_freq_factor = rs.low_freq_factor,
                      .high_freq_factor = rs.high_freq_factor,
                      .original_max_positions = double(rs.original_max_position_embeddings),
                      .kind = rs.type == RopeType::linear ? RopeKind::linear : RopeKind::llama3};
  c.norm_eps = static_cast<float>(m.norm_eps);
  c.init_std = static_cast<float>(m.init_std);
  c.seed = spec.run.seed;
  c.tp = spec.parallel.tp;
  c.cp = spec.parallel.cp;
  c.sequence_parallel = spec.parallel.sequence_parallel;
  c.recompute_full = spec.parallel.recompute == Recompute::full;
  c.recompute_num_layers = spec.parallel.recompute_num_layers;
  c.doc_masking = spec.data.reset_attention_mask;
  c.reset_positions = spec.data.reset_position_ids;
  const PrecisionSpec& pr = spec.precision;
  c.act_dtype = pr.compute == ComputeDtype::fp16   ? DType::f16
                : pr.compute == ComputeDtype::fp32 ? DType::f32
                                                   : DType::bf16;  // bf16, and fp8's non-GEMM parts
  c.fp8 = pr.compute == ComputeDtype::fp8;
  c.fp8_first_last_bf16 = pr.fp8_first_last_bf16;
  c.fp8_amax_history = pr.fp8_amax_history;
  c.fp8_margin = pr.fp8_margin;
  const MoESpec& e = m.moe;
  c.moe_enabled = e.enabled;
  c.moe_every = e.every;
  c.moe_first_dense = e.first_dense;
  c.moe.n_experts = e.n_experts;
  c.moe.top_k = e.top_k;
  c.moe.n_shared_experts = e.n_shared_experts;
  c.moe.shared_gate = e.shared_expert_gate;
  c.moe.d_ff_expert = e.d_ff_expert;
  c.moe.balance = e.balance == Balance::aux_free   ? model::MoeBalance::aux_free
                  : e.balance == Balance::aux_loss ? model::MoeBalance::aux_loss
                                                   : model::MoeBalance::none;
  c.moe.sigmoid = e.score == RouterScore::sigmoid;
  c.moe.normalize_topk = e.normalize_topk;
  c.moe.topk_scaling = static_cast<float>(e.topk_scaling_factor);
  c.moe.n_groups = e.n_groups;
  c.moe.top_groups = e.top_groups;
  c.moe.aux_loss_coeff = static_cast<float>(e.aux_loss_coeff);
  c.moe.z_loss_coeff = static_cast<float>(e.z_loss_coeff);
  c.moe.seq_aux_loss_coeff = static_cast<float>(e.seq_aux_loss_coeff);
  c.moe.capacity_factor = e.capacity_factor ? static_cast<float>(*e.capacity_factor) : 0.0f;
  c.moe.ep_recv_headroom = e.ep_recv_headroom;
  return c;
}

model::BatchShape micro_batch_shape(const JobSpec& spec) {
  // Each context-parallel rank holds seq_len / cp tokens of every sequence.
  return model::BatchShape{spec.train.micro_batch, spec.train.seq_len / spec.parallel.cp};
}

}  // namespace trainer::engine
