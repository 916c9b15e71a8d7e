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
  TRAINER_CHECK(cfg.n_head % cfg.tp == 0 && cfg.n_kv_head % cfg.tp == 0 && cfg.d_ff % cfg.tp == 0 &&
                    (!cfg.sequence_parallel || batch.tokens() % cfg.tp == 0),
                "model does not split over tp {}", cfg.tp);
  single_tp_ = parallel::make_single_communicator("tp");
  tp_ = single_tp_.get();
  int64_t N = batch.B * batch.T;
  ids_ = buf_.add(Category::activations, "input_ids", {N}, DType::i32);
  targets_ = buf_.add(Category::activations, "targets", {N}, DType::i32);
  embedding_.declare(buf_, cfg_, batch_);
  blocks_.resize(cfg_.n_layer);
  for (int l = 0; l < cfg_.n_layer; ++l) blocks_[l].declare(buf_, l, cfg_, batch_);
  head_.declare(buf_, cfg_, batch_, embedding_.token_table());
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
      int64_t row0 = s.tp_dim == 0 ? rows * cfg_.tp_rank : 0;
      int64_t col0 = s.tp_dim == 1 || (s.tp_dim == 0 && t.ndim == 1) ? cols * cfg_.tp_rank : 0;
      if (s.tp_dim == 0 && t.ndim == 1) row0 = 0;
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

void Model::finish_gradients(Context& ctx) {
  if (tp_->size() == 1) return;
  for (const auto& p : buf_.params())
    if (p.spec.sp_partial) parallel::copy_to_tp_backward(*tp_, buf_.get(p.grad));
}

void Model::zero_grads(Context& ctx) {
  for (const auto& p : buf_.params()) fill(ctx, buf_.get(p.grad), 0.0f);
}

void Model::forward(Context& ctx) {
  LayerEnv env = this->env(ctx);
  Tensor ids = input_ids();
  embedding_.forward(env, scratch_, ids);
  Tensor x = embedding_.out(env);
  for (const Block& b : blocks_) {
    b.forward(env, scratch_, x);
    x = b.out(env);
  }
  head_.forward(env, x, targets());
}

Tensor Model::losses(Context& ctx) { return head_.losses(env(ctx)); }

void Model::backward(Context& ctx, float dloss) {
  LayerEnv env = this->env(ctx);
  Tensor dres = buf_.get(scratch_.dres);
  Tensor last = blocks_.empty() ? embedding_.out(env) : blocks_.back().out(env);
  head_.backward(env, scratch_, dres, last, targets(), dloss);
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    Tensor in = l == 0 ? embedding_.out(env) : blocks_[l - 1].out(env);
    blocks_[l].backward(env, scratch_, dres, in);
  }
  embedding_.backward(env, scratch_, dres, input_ids());
}

double Model::flops_per_token() const {
  double C = cfg_.d_model, F = cfg_.d_ff, D = cfg_.head_dim(), T = batch_.T;
  double H = cfg_.n_head, Hkv = cfg_.n_kv_head, V = cfg_.padded_vocab();
  double mlp = (cfg_.is_llama() ? 3.0 : 2.0) * C * F;
  double attn_proj = C * H * D * 2 + C * Hkv * D * 2;
  double attn_core = 2.0 * T * H * D;  // QK^T and PV per token
  double per_layer = 2.0 * (mlp + attn_proj) + 2.0 * attn_core;
  double forward = cfg_.n_layer * per_layer + 2.0 * C * V;
  return 3.0 * forward;  // backward costs twice the forward
}

}  // namespace trainer::model
