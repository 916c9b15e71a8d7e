// Model assembly, initialisation and the forward/backward walk over the layers.
#include "model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cast.h"
#include "kernels/cuda/nvtx.h"
#include "kernels/elementwise.h"
#include "kernels/memory.h"
#include "model/fp8_gemm.h"
#include "model/moe_layer.h"
#include "model/rng.h"
#include "parallel/tp_regions.h"

namespace trainer::model {

Model::Model(const ModelConfig& cfg, const BatchShape& batch) : cfg_(cfg), batch_(batch) {
  TRAINER_CHECK(cfg.d_model % cfg.n_head == 0 && cfg.n_head % cfg.n_kv_head == 0,
                "inconsistent model config");
  TRAINER_CHECK(cfg.n_head % cfg.tp == 0 &&
                    (cfg.n_kv_head % cfg.tp == 0 || cfg.tp % cfg.n_kv_head == 0) && cfg.d_ff % cfg.tp == 0 &&
                    (!cfg.sequence_parallel || batch.tokens() % cfg.tp == 0),
                "model does not split over tp {}", cfg.tp);
  TRAINER_CHECK(cfg.cp == 1 || batch.T % parallel::CpLayout::kLocalChunks == 0,
                "model does not split over cp {}: {} local tokens per sequence", cfg.cp, batch.T);
  single_tp_ = parallel::make_single_communicator("tp");
  tp_ = single_tp_.get();
  int64_t N = batch.B * batch.T;
  buf_.set_compute_dtype(cfg.act_dtype);
  if (cfg.shard_align > 0) {
    if (cfg.share_blocks)
      buf_.share_block_parameters(cfg.shard_align, cfg.shard_experts_apart, cfg.shared_regions);
    else if (cfg.share_block_grads)
      buf_.share_block_gradients(cfg.shard_align, cfg.shard_experts_apart, cfg.shared_regions);
    else
      buf_.pad_param_parts(cfg.shard_align, cfg.shard_experts_apart);
  }
  if (cfg.fp8) declare_fp8_workspace();
  std::vector<std::pair<int, int>> ranges = cfg.chunk_layers;
  if (ranges.empty()) ranges.emplace_back(cfg.layer_begin, cfg.stage_layer_end());
  const int num_chunks = static_cast<int>(ranges.size());
  int blocks = 0;
  for (auto [begin, end] : ranges) {
    TRAINER_CHECK(0 <= begin && begin <= end && end <= cfg.n_layer &&
                      (begin < end || (cfg.first_stage && cfg.last_stage && num_chunks == 1)),
                  "bad pipeline stage: layers [{}, {}) of {}", begin, end, cfg.n_layer);
    blocks += end - begin;
  }
  blocks_.resize(blocks);
  chunks_.resize(num_chunks);
  // Chunk by chunk, so each chunk's activations are one region of the arena
  // (its parameters follow the same order in the flat parameter arena).
  const int64_t R = residual_rows(cfg, batch);
  for (int c = 0; c < num_chunks; ++c) {
    Chunk& ch = chunks_[c];
    ch.act_begin = buf_.category_bytes(Category::activations);
    // Chunk 0 keeps the names of a one-chunk stage; the others say their chunk.
    std::string io = c == 0 ? "pipeline" : fmt::format("pipeline.chunk{}", c);
    auto params_now = [&] { return static_cast<int>(buf_.params().size()); };
    if (has_embedding(c)) {
      ids_ = buf_.add(Category::activations, "input_ids", {N}, DType::i32);
      embedding_params_.begin = params_now();
      buf_.begin_param_unit(false);
      embedding_.declare(buf_, cfg_, batch_);
      buf_.end_param_unit();
      embedding_params_.end = params_now();
    } else {
      ch.stage_in = buf_.add(Category::activations, io + ".input", {R, cfg.d_model}, buf_.act_dtype());
    }
    if (has_head(c)) targets_ = buf_.add(Category::activations, "targets", {N}, DType::i32);
    const std::string docs = c == 0 ? "documents" : fmt::format("documents.chunk{}", c);
    if (cfg.doc_masking)
      ch.doc_start = buf_.add(Category::activations, docs + ".doc_start", {N}, DType::i32);
    if (cfg.reset_positions)
      ch.positions = buf_.add(Category::activations, docs + ".positions", {N}, DType::i32);
    ch.block_begin = c == 0 ? 0 : chunks_[c - 1].block_end;
    ch.block_end = ch.block_begin + (ranges[c].second - ranges[c].first);
    block_params_.resize(blocks_.size());
    for (int l = ranges[c].first; l < ranges[c].second; ++l) {
      buf_.set_fp8_active(cfg.fp8_layer(l));
      const int b = ch.block_begin + l - ranges[c].first;
      block_params_[b].begin = params_now();
      block_unit_.resize(blocks_.size());
      block_unit_[b] = static_cast<int>(buf_.param_units().size());
      buf_.begin_param_unit(true);
      blocks_[b].declare(buf_, l, cfg_, batch_, cfg_.recomputes(l - ranges[c].first));
      buf_.end_param_unit();
      block_params_[b].end = params_now();
    }
    buf_.set_fp8_active(false);
    if (has_head(c)) {
      head_params_.begin = params_now();
      buf_.begin_param_unit(false);
      // A last stage without the embedding keeps its own copy of a tied table
      // (same name and init); the trainer sums the two copies' gradients.
      ParamId table = has_embedding(c)       ? embedding_.token_table()
                      : cfg.tie_embeddings ? Embedding::declare_token_table(buf_, cfg_, true)
                                           : ParamId{};
      head_.declare(buf_, cfg_, batch_, table);
      buf_.end_param_unit();
      head_params_.end = params_now();
    } else {
      ch.stage_dout =
          buf_.add(Category::activations, io + ".output_grad", {R, cfg.d_model}, buf_.act_dtype());
    }
    ch.act_end = buf_.category_bytes(Category::activations);
  }
  buf_.end_param_units();
  scratch_.declare(buf_, cfg_, batch_);
  const int64_t n_moe = static_cast<int64_t>(moe_layers().size());
  if (n_moe > 0) {
    // The step counters of every MoE layer of this stage, then their two
    // aux-loss sums: one reduction and one read per step (gather_moe_step).
    const int64_t E = cfg_.moe.n_experts;
    moe_summary_ = buf_.add(Category::scratch, "moe.step_summary", {n_moe * (2 * E + 2)});
  }
}

void Model::declare_fp8_workspace() {
  // Sized for the largest operand of any block linear layer: inputs and
  // output gradients are (tokens, C | local heads * D | local d_ff), weights
  // C by one of the latter.
  int64_t N = batch_.tokens(), C = cfg_.d_model;
  int64_t inner = std::max<int64_t>(int64_t(cfg_.local_heads()) * cfg_.head_dim(), cfg_.local_ff());
  if (const MlaConfig& a = cfg_.mla; a.enabled)  // kv_b's output and the latents
    inner = std::max({inner, cfg_.local_heads() * (a.qk_nope + a.v_dim), a.q_lora_rank,
                      a.kv_lora_rank + a.qk_rope});
  int64_t act = N * std::max(C, inner), w = C * inner;
  if (cfg_.mla.enabled)  // q_b and kv_b read a latent, not C
    w = std::max({C, cfg_.mla.q_lora_rank, cfg_.mla.kv_lora_rank}) * inner;
  // MoE layers' expert GEMMs: up to R routed rows (one expert may get them
  // all), plus 15 padding rows on the GPU; shared experts N rows of Fs.
  int64_t pad_rows = 0, pad_width = 0;
  if (cfg_.moe_enabled) {
    const int64_t F = cfg_.moe.d_ff_expert, Fs = int64_t{cfg_.moe.n_shared_experts} * F;
    const int64_t rows = std::max(moe_plan_size(cfg_, cfg_.moe, batch_).rows, residual_rows(cfg_, batch_));
    pad_rows = cfg_.fp8_pad_rows ? fp8_padded_rows(rows) : rows;
    pad_width = std::max({C, F, Fs});
    act = std::max(act, pad_rows * pad_width);
    w = std::max(w, C * std::max(F, Fs));
  }
  Buffers::Fp8Workspace ws;
  ws.cache_weights = cfg_.fp8_cache_weights;
  ws.q = buf_.add(Category::scratch, "fp8.codes", {std::max(act, w)}, DType::e4m3);
  ws.x = buf_.add(Category::scratch, "fp8.input_dequantised", {act});
  ws.w = buf_.add(Category::scratch, "fp8.weight_dequantised", {w});
  ws.g = buf_.add(Category::scratch, "fp8.grad_dequantised", {act});
  if (cfg_.fp8_pad_rows && cfg_.moe_enabled) {
    const DType d = buf_.act_dtype();
    ws.pad_in = buf_.add(Category::scratch, "fp8.padded_input", {pad_rows * pad_width}, d);
    ws.pad_out = buf_.add(Category::scratch, "fp8.padded_output", {pad_rows * pad_width}, d);
    ws.pad_dinp = buf_.add(Category::scratch, "fp8.padded_input_grad", {pad_rows * pad_width}, d);
  }
  buf_.enable_fp8(cfg_.fp8_amax_history, cfg_.fp8_margin, ws);
}

void Model::refresh_compute_weights(Context& ctx) {
  for (const Buffers::ParamUnit& u : buf_.param_units())
    if (!u.shared) refresh_compute_weights(ctx, u);
}

void Model::refresh_compute_weights(Context& ctx, const Buffers::ParamUnit& unit) {
  buf_.invalidate_fp8_weights();
  for (int i = unit.param_begin; i < unit.param_end; ++i) {
    const Buffers::Param& p = buf_.params()[i];
    if (p.compute >= 0) cast(ctx, buf_.get(p.compute), buf_.get(p.value));
  }
}

void Model::set_tp_group(parallel::Communicator* tp) { tp_ = tp ? tp : single_tp_.get(); }

void Model::init_parameters(Context& ctx) {
  TRAINER_CHECK(!buf_.blocks_shared(), "init_parameters: blocks share one region: init unit by unit");
  for (const auto& p : buf_.params()) init_parameter(p);
}

void Model::init_parameters(Context& ctx, const Buffers::ParamUnit& unit) {
  for (int i = unit.param_begin; i < unit.param_end; ++i) init_parameter(buf_.params()[i]);
}

void Model::init_parameter(const Buffers::Param& p) {
  std::vector<float> host;
  Tensor t = buf_.get(p.value);
  host.assign(t.numel(), 0.0f);
  const ParamSpec& s = p.spec;
  if (s.init == Init::ones) host.assign(t.numel(), 1.0f);
  if (s.init == Init::normal) {
    // Local element (i, j) of this rank's shard is global element (gi, gj):
    // the value depends only on the global index, so every layout agrees.
    int64_t rows = t.ndim == 2 ? t.size(0) : 1, cols = t.size(-1);
    int64_t gcols = s.global_shape.size() == 2 ? s.global_shape[1] : s.global_shape[0];
    // A tp shard is a block of rows (tp_dim 0 of a matrix) or of columns
    // (tp_dim 1, or the only dim of a vector).
    bool splits_rows = s.tp_dim == 0 && t.ndim == 2;
    bool splits_cols = s.tp_dim == 1 || (s.tp_dim == 0 && t.ndim == 1);
    int64_t shard = cfg_.tp_rank / s.tp_replicas;
    int64_t row0 = splits_rows ? rows * shard : 0;
    int64_t col0 = splits_cols ? cols * shard : 0;
    int64_t valid_rows = s.valid_rows < 0 ? INT64_MAX : s.valid_rows;
    uint64_t key = hash_name(s.name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      int64_t gi = row0 + i;
      if (gi >= valid_rows) continue;
      for (int64_t j = 0; j < cols; ++j)
        host[i * cols + j] = s.std * normal_at(cfg_.seed, key, uint64_t(gi * gcols + col0 + j));
    }
  }
  copy_from_host(t, host.data());
}

void Model::set_kv_group(std::unique_ptr<parallel::Communicator> kv) { kv_ = std::move(kv); }

void Model::finish_gradients(Context& ctx) {
  for (const Buffers::ParamUnit& u : buf_.param_units())
    if (!u.grads_shared) finish_gradients(ctx, u);
}

void Model::finish_gradients(Context& ctx, const Buffers::ParamUnit& unit) {
  if (tp_->size() == 1) return;
  for (int i = unit.param_begin; i < unit.param_end; ++i) finish_gradient(buf_.params()[i]);
}

void Model::finish_gradient(const Buffers::Param& p) {
  if (p.spec.sp_partial) parallel::copy_to_tp_backward(*tp_, buf_.get(p.grad));
  // A replicated KV head's gradient on each replica covers only that
  // replica's query heads: the sum over its replicas is the whole gradient.
  if (p.spec.tp_replicas > 1) {
    parallel::Communicator& group = p.spec.tp_replicas == tp_->size() ? *tp_ : *kv_group();
    TRAINER_CHECK(group.size() == p.spec.tp_replicas, "{}: KV replica group of {} ranks, expected {}",
                  p.spec.name, group.size(), p.spec.tp_replicas);
    group.all_reduce(buf_.get(p.grad), parallel::ReduceOp::sum);
  }
}

parallel::Communicator* Model::kv_group() const {
  TRAINER_CHECK(kv_ != nullptr, "KV heads are replicated over {} of {} tp ranks but no KV replica "
                "group was set (Model::set_kv_group)", cfg_.kv_replicas(), tp_->size());
  return kv_.get();
}

void Model::zero_grads(Context& ctx) {
  for (const auto& p : buf_.params()) fill(ctx, buf_.get(p.grad), 0.0f);
}

Tensor Model::tied_table_grad() const {
  if (!cfg_.tie_embeddings || (cfg_.first_stage && cfg_.last_stage)) return Tensor{};
  if (cfg_.first_stage) return buf_.grad(embedding_.token_table());
  for (const auto& p : buf_.params())
    if (p.spec.tied_copy) return buf_.get(p.grad);
  return Tensor{};
}

const Model::Chunk& Model::chunk(int c) const {
  TRAINER_CHECK(c >= 0 && c < num_chunks(), "model chunk {} of {}", c, num_chunks());
  TRAINER_CHECK(bound_chunk_ < 0 || bound_chunk_ == c,
                "model chunk {} used while chunk {}'s activations are bound", c, bound_chunk_);
  return chunks_[c];
}

size_t Model::chunk_activation_bytes(int c) const {
  TRAINER_CHECK(c >= 0 && c < num_chunks(), "model chunk {} of {}", c, num_chunks());
  return chunks_[c].act_end - chunks_[c].act_begin;
}

void Model::bind_chunk(int c, void* slot, Device device) {
  TRAINER_CHECK(c >= 0 && c < num_chunks(), "model chunk {} of {}", c, num_chunks());
  // The arena base that puts chunk c's region at `slot`; the other chunks'
  // buffers then point elsewhere, so chunk() refuses them until rebound.
  auto base = reinterpret_cast<uintptr_t>(slot) - chunks_[c].act_begin;
  buf_.bind(Category::activations, reinterpret_cast<void*>(base), device);
  bound_chunk_ = num_chunks() == 1 ? -1 : c;
}

Tensor Model::stage_in(const LayerEnv& env, int c) const {
  return has_embedding(c) ? embedding_.out(env) : buf_.get(chunk(c).stage_in);
}

Tensor Model::stage_input(int c) const { return buf_.get(chunk(c).stage_in); }

Tensor Model::doc_start(int c) const {
  const Chunk& ch = chunk(c);
  return ch.doc_start >= 0 ? buf_.get(ch.doc_start) : Tensor{};
}

Tensor Model::positions(int c) const {
  const Chunk& ch = chunk(c);
  return ch.positions >= 0 ? buf_.get(ch.positions) : Tensor{};
}

LayerEnv Model::env(Context& ctx, int c) const {
  LayerEnv e = env(ctx);
  e.doc_start = doc_start(c);
  e.positions = positions(c);
  return e;
}
Tensor Model::stage_output_grad(int c) const { return buf_.get(chunk(c).stage_dout); }

Tensor Model::stage_output(Context& ctx, int c) {
  LayerEnv env = this->env(ctx);
  const Chunk& ch = chunk(c);
  return ch.block_begin == ch.block_end ? stage_in(env, c) : blocks_[ch.block_end - 1].out(env);
}

void Model::forward(Context& ctx, int c) {
  LayerEnv env = this->env(ctx, c);
  const Chunk& ch = chunk(c);
  if (has_embedding(c)) {
    cuda::NvtxRange range("embedding forward");
    embedding_.forward(env, scratch_, input_ids());
  }
  Tensor x = stage_in(env, c);
  for (int l = ch.block_begin; l < ch.block_end; ++l) {
    if (block_hooks_) block_hooks_->gather(block_unit_[l], false);
    blocks_[l].forward(env, scratch_, x);
    x = blocks_[l].out(env);
  }
  if (has_head(c)) {
    cuda::NvtxRange range("lm_head forward");
    head_.forward(env, x, targets());
  }
}

Tensor Model::losses(Context& ctx) { return head_.losses(env(ctx)); }
Tensor Model::logits(Context& ctx) { return head_.logits(env(ctx)); }

void Model::backward(Context& ctx, float dloss, int c, std::optional<float> aux_dloss) {
  LayerEnv env = this->env(ctx, c);
  const Chunk& ch = chunk(c);
  Tensor dres = buf_.get(scratch_.dres);
  if (has_head(c)) {
    cuda::NvtxRange range("lm_head backward");
    head_.backward(env, scratch_, dres, stage_output(ctx, c), targets(), dloss);
    report_ready(head_params_);
  } else {
    copy(ctx, dres, stage_output_grad(c));
  }
  for (int l = ch.block_end - 1; l >= ch.block_begin; --l) {
    Tensor in = l == ch.block_begin ? stage_in(env, c) : blocks_[l - 1].out(env);
    if (block_hooks_) block_hooks_->gather(block_unit_[l], true);
    if (blocks_[l].recomputed()) {
      // Every recomputed block's internals share one region: bring back this block's.
      LayerEnv again = env;
      again.recompute = true;
      blocks_[l].forward(again, scratch_, in);
    }
    // An MoE aux loss counts once per micro-batch, as the token losses do in
    // sum (all of its tokens: every cp rank's chunks).
    blocks_[l].backward(env, scratch_, dres, in,
                        aux_dloss.value_or(dloss) * float(batch_.tokens() * cfg_.cp));
    if (block_hooks_) block_hooks_->release_gradients(block_unit_[l]);
    report_ready(block_params_[l]);
  }
  if (has_embedding(c)) {
    cuda::NvtxRange range("embedding backward");
    embedding_.backward(env, scratch_, dres, input_ids());
    report_ready(embedding_params_);
  }
}

bool Model::grad_final_after_backward(int param) const {
  TRAINER_CHECK(param >= 0 && param < static_cast<int>(buf_.params().size()), "parameter {} of {}",
                param, buf_.params().size());
  const ParamSpec& s = buf_.params()[param].spec;
  // finish_gradients sums these over tp (or the KV replicas) after backward.
  if (s.sp_partial || s.tp_replicas > 1) return false;
  // Both copies of a token table cut over pipeline stages are summed over pp.
  if (s.tied_copy) return false;
  if (cfg_.tie_embeddings && !(cfg_.first_stage && cfg_.last_stage) && cfg_.first_stage &&
      param == embedding_.token_table().index)
    return false;
  return true;
}

void Model::report_ready(ParamRange r) const {
  if (!grad_ready_) return;
  for (int p = r.begin; p < r.end; ++p)
    if (grad_final_after_backward(p)) grad_ready_(p);
}

std::vector<const Moe*> Model::moe_layers() const {
  std::vector<const Moe*> out;
  for (const Block& b : blocks_)
    if (b.moe()) out.push_back(b.moe());
  return out;
}

std::vector<int> Model::moe_layer_units() const {
  std::vector<int> out;
  for (size_t b = 0; b < blocks_.size(); ++b)
    if (blocks_[b].moe()) out.push_back(block_unit_[b]);
  return out;
}

void Model::reset_moe_stats(Context& ctx) {
  for (const Moe* m : moe_layers()) m->reset_step_stats(ctx, buf_);
}

Tensor Model::gather_moe_step(Context& ctx) const {
  const std::vector<const Moe*> layers = moe_layers();
  if (layers.empty()) return {};
  const int64_t L = static_cast<int64_t>(layers.size()), E = cfg_.moe.n_experts;
  Tensor all = buf_.get(moe_summary_);
  for (int64_t i = 0; i < L; ++i) {
    copy(ctx, all.slice(i * 2 * E, (i + 1) * 2 * E), layers[i]->step_counts(buf_).view({2 * E}));
    copy(ctx, all.slice(L * 2 * E + i, L * 2 * E + i + 1), layers[i]->step_aux(buf_));
    Tensor seq = all.slice(L * 2 * E + L + i, L * 2 * E + L + i + 1);
    if (Tensor s = layers[i]->step_seq_aux(buf_); !s.empty()) copy(ctx, seq, s);
    else fill(ctx, seq, 0.0f);
  }
  return all;
}

double Model::flops_per_token() const {
  double C = cfg_.d_model, F = cfg_.d_ff, D = cfg_.head_dim(), T = batch_.T * cfg_.cp;
  double H = cfg_.n_head, Hkv = cfg_.n_kv_head, V = cfg_.padded_vocab();
  double mlp = (cfg_.is_llama() ? 3.0 : 2.0) * C * F;
  double attn_proj = C * H * D * 2 + C * Hkv * D * 2;
  // Multi-head latent attention: its down- and up-projections, and value
  // heads of their own size (the kernels' zero padding is not model work).
  double Dv = D;
  if (const MlaConfig& a = cfg_.mla; a.enabled) {
    const double Lq = a.q_lora_rank, Lkv = a.kv_lora_rank;
    Dv = a.v_dim;
    attn_proj = (Lq > 0 ? C * Lq + Lq * H * D : C * H * D) + C * (Lkv + a.qk_rope) +
                Lkv * H * (a.qk_nope + Dv) + H * Dv * C;
  }
  // QK^T and PV per token over the keys a query may see: the whole sequence
  // (PaLM's convention, the causal half not taken off), or its layer's window.
  auto attn_core = [&](int layer) {
    const int64_t w = cfg_.window_of(layer);
    return (w > 0 ? std::min<double>(T, w) : T) * H * (D + Dv);
  };
  double per_layer = 2.0 * (mlp + attn_proj);
  // An MoE layer: the router plus top_k routed and the shared experts' GEMMs.
  const MoeConfig& moe = cfg_.moe;
  double moe_mlp = (cfg_.is_llama() ? 3.0 : 2.0) * C * moe.d_ff_expert *
                       (moe.top_k + moe.n_shared_experts) + C * moe.n_experts;
  double forward = 2.0 * C * V;
  for (int l = 0; l < cfg_.n_layer; ++l)
    forward += per_layer + 2.0 * attn_core(l) + (cfg_.is_moe_layer(l) ? 2.0 * (moe_mlp - mlp) : 0.0);
  return 3.0 * forward;  // backward costs twice the forward
}

}  // namespace trainer::model
