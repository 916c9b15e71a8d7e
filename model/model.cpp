// Model assembly, initialisation and the forward/backward walk over the layers.
#include "model/model.h"

#include <vector>

#include "kernels/elementwise.h"
#include "kernels/memory.h"
#include "model/rng.h"

namespace trainer::model {

Model::Model(const ModelConfig& cfg, const BatchShape& batch) : cfg_(cfg), batch_(batch) {
  TRAINER_CHECK(cfg.d_model % cfg.n_head == 0 && cfg.n_head % cfg.n_kv_head == 0,
                "inconsistent model config");
  int64_t N = batch.B * batch.T;
  ids_ = buf_.add(Category::activations, "input_ids", {N}, DType::i32);
  targets_ = buf_.add(Category::activations, "targets", {N}, DType::i32);
  embedding_.declare(buf_, cfg_, batch_);
  blocks_.resize(cfg_.n_layer);
  for (int l = 0; l < cfg_.n_layer; ++l) blocks_[l].declare(buf_, l, cfg_, batch_);
  head_.declare(buf_, cfg_, batch_, embedding_.token_table());
  scratch_.declare(buf_, cfg_, batch_);
}

void Model::init_parameters(Context& ctx) {
  std::vector<float> host;
  for (const auto& p : buf_.params()) {
    Tensor t = buf_.get(p.value);
    host.assign(t.numel(), 0.0f);
    const ParamSpec& s = p.spec;
    int64_t row = s.global_shape.size() == 2 ? s.global_shape[1] : t.numel();
    int64_t valid = s.valid_rows < 0 ? t.numel() : s.valid_rows * row;
    uint64_t key = hash_name(s.name);
    if (s.init == Init::ones) {
      host.assign(t.numel(), 1.0f);
    } else if (s.init == Init::normal) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < valid; ++i) host[i] = s.std * normal_at(cfg_.seed, key, i);
    }
    copy_from_host(t, host.data());
  }
}

void Model::zero_grads(Context& ctx) {
  for (const auto& p : buf_.params()) fill(ctx, buf_.get(p.grad), 0.0f);
}

void Model::forward(Context& ctx) {
  LayerEnv env{ctx, buf_};
  Tensor ids = input_ids();
  embedding_.forward(env, ids);
  Tensor x = embedding_.out(env);
  for (const Block& b : blocks_) {
    b.forward(env, x);
    x = b.out(env);
  }
  head_.forward(env, x, targets());
}

Tensor Model::losses(Context& ctx) { return head_.losses(LayerEnv{ctx, buf_}); }

void Model::backward(Context& ctx, float dloss) {
  LayerEnv env{ctx, buf_};
  Tensor dres = buf_.get(scratch_.dres);
  Tensor last = blocks_.empty() ? embedding_.out(env) : blocks_.back().out(env);
  head_.backward(env, scratch_, dres, last, targets(), dloss);
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    Tensor in = l == 0 ? embedding_.out(env) : blocks_[l - 1].out(env);
    blocks_[l].backward(env, scratch_, dres, in);
  }
  embedding_.backward(env, dres, input_ids());
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
