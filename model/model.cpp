// Model assembly, initialisation and the forward/backward walk over the layers.
#include "model/model.h"

#include <vector>

#include "kernels/elementwise.h"
#include "kernels/memory.h"
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
  single_tp_ = parallel::make_single_communicator("tp");
  tp_ = single_tp_.get();
  int64_t N = batch.B * batch.T;
  const int begin = cfg.layer_begin, end = cfg.stage_layer_end();
  TRAINER_CHECK(0 <= begin && begin <= end && end <= cfg.n_layer &&
                    (begin < end || (cfg.first_stage && cfg.last_stage)),
                "bad pipeline stage: layers [{}, {}) of {}", begin, end, cfg.n_layer);
  if (cfg.first_stage) {
    ids_ = buf_.add(Category::activations, "input_ids", {N}, DType::i32);
    embedding_.declare(buf_, cfg_, batch_);
  } else {
    stage_in_ = buf_.add(Category::activations, "pipeline.input", {residual_rows(cfg, batch), cfg.d_model});
  }
  if (cfg.last_stage) targets_ = buf_.add(Category::activations, "targets", {N}, DType::i32);
  blocks_.resize(end - begin);
  for (int l = begin; l < end; ++l) blocks_[l - begin].declare(buf_, l, cfg_, batch_);
  if (cfg.last_stage) {
    // A last stage without the embedding keeps its own copy of a tied table
    // (same name and init); the trainer sums the two copies' gradients.
    ParamId table = cfg.first_stage ? embedding_.token_table()
                    : cfg.tie_embeddings ? Embedding::declare_token_table(buf_, cfg_, true)
                                         : ParamId{};
    head_.declare(buf_, cfg_, batch_, table);
  } else {
    stage_dout_ = buf_.add(Category::activations, "pipeline.output_grad",
                           {residual_rows(cfg, batch), cfg.d_model});
  }
  scratch_.declare(buf_, cfg_, batch_);
}

void Model::set_tp_group(parallel::Communicator* tp) { tp_ = tp ? tp : single_tp_.get(); }

void Model::init_parameters(Context& ctx) {
  std::vector<float> host;
  for (const auto& p : buf_.params()) {
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
}

void Model::set_kv_group(std::unique_ptr<parallel::Communicator> kv) { kv_ = std::move(kv); }

void Model::finish_gradients(Context& ctx) {
  if (tp_->size() == 1) return;
  for (const auto& p : buf_.params()) {
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

Tensor Model::stage_in(const LayerEnv& env) const {
  return cfg_.first_stage ? embedding_.out(env) : buf_.get(stage_in_);
}

Tensor Model::stage_output(Context& ctx) {
  LayerEnv env = this->env(ctx);
  return blocks_.empty() ? stage_in(env) : blocks_.back().out(env);
}

void Model::forward(Context& ctx) {
  LayerEnv env = this->env(ctx);
  if (cfg_.first_stage) embedding_.forward(env, scratch_, input_ids());
  Tensor x = stage_in(env);
  for (const Block& b : blocks_) {
    b.forward(env, scratch_, x);
    x = b.out(env);
  }
  if (cfg_.last_stage) head_.forward(env, x, targets());
}

Tensor Model::losses(Context& ctx) { return head_.losses(env(ctx)); }

void Model::backward(Context& ctx, float dloss) {
  LayerEnv env = this->env(ctx);
  Tensor dres = buf_.get(scratch_.dres);
  if (cfg_.last_stage)
    head_.backward(env, scratch_, dres, stage_output(ctx), targets(), dloss);
  else
    copy(ctx, dres, stage_output_grad());
  for (int l = static_cast<int>(blocks_.size()) - 1; l >= 0; --l) {
    Tensor in = l == 0 ? stage_in(env) : blocks_[l - 1].out(env);
    // An MoE aux loss counts once per micro-batch, as the token losses do in sum.
    blocks_[l].backward(env, scratch_, dres, in, dloss * float(batch_.tokens()));
  }
  if (cfg_.first_stage) embedding_.backward(env, scratch_, dres, input_ids());
}

std::vector<const Moe*> Model::moe_layers() const {
  std::vector<const Moe*> out;
  for (const Block& b : blocks_)
    if (b.moe()) out.push_back(b.moe());
  return out;
}

double Model::aux_loss() const {
  double sum = 0;
  for (const Moe* m : moe_layers()) sum += m->aux_loss(buf_);
  return sum;
}

void Model::reset_moe_stats(Context& ctx) {
  for (const Moe* m : moe_layers()) m->reset_step_stats(ctx, buf_);
}

double Model::flops_per_token() const {
  double C = cfg_.d_model, F = cfg_.d_ff, D = cfg_.head_dim(), T = batch_.T;
  double H = cfg_.n_head, Hkv = cfg_.n_kv_head, V = cfg_.padded_vocab();
  double mlp = (cfg_.is_llama() ? 3.0 : 2.0) * C * F;
  double attn_proj = C * H * D * 2 + C * Hkv * D * 2;
  double attn_core = 2.0 * T * H * D;  // QK^T and PV per token
  double per_layer = 2.0 * (mlp + attn_proj) + 2.0 * attn_core;
  // An MoE layer: the router plus top_k routed and the shared experts' GEMMs.
  const MoeConfig& moe = cfg_.moe;
  double moe_mlp = (cfg_.is_llama() ? 3.0 : 2.0) * C * moe.d_ff_expert *
                       (moe.top_k + moe.n_shared_experts) + C * moe.n_experts;
  double forward = 2.0 * C * V;
  for (int l = 0; l < cfg_.n_layer; ++l)
    forward += per_layer + (cfg_.is_moe_layer(l) ? 2.0 * (moe_mlp - mlp) : 0.0);
  return 3.0 * forward;  // backward costs twice the forward
}

}  // namespace trainer::model
