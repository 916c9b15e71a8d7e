// One CPU model over B sequences of T tokens, with its arenas on the host:
// the harness of the whole-model tests that set token ids and read the
// per-token losses and the parameter gradients.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/model.h"
#include "test/common/host_arenas.h"

namespace trainer::testing {

// Two blocks of width 16 with 4 heads (llama: 2 KV heads), vocab 50, 24
// positions, weights large enough (std 0.2) that every path's gradient shows.
inline model::ModelConfig whole_model_config(model::Family family) {
  model::ModelConfig cfg;
  cfg.family = family;
  cfg.n_layer = 2;
  cfg.d_model = 16;
  cfg.n_head = 4;
  cfg.n_kv_head = family == model::Family::llama ? 2 : 4;
  cfg.d_ff = 24;
  cfg.vocab_size = 50;
  cfg.max_seq_len = 24;
  cfg.tie_embeddings = family == model::Family::gpt2;
  cfg.init_std = 0.2f;
  return cfg;
}

struct ModelRun {
  Context ctx;
  model::Model model;
  HostArenas arenas;
  ModelRun(const model::ModelConfig& cfg, int64_t B, int64_t T)
      : model(cfg, model::BatchShape{B, T}), arenas(model.buffers()) {
    model.init_parameters(ctx);
  }
  void set_tokens(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets) {
    std::copy(ids.begin(), ids.end(), model.input_ids().ptr<int32_t>());
    std::copy(targets.begin(), targets.end(), model.targets().ptr<int32_t>());
  }
  std::vector<float> losses() {
    model.forward(ctx);
    Tensor l = model.losses(ctx);
    return std::vector<float>(l.ptr<float>(), l.ptr<float>() + l.numel());
  }
  double loss_sum() {
    double s = 0;
    for (float x : losses()) s += x;
    return s;
  }
  // Every parameter's gradient of the summed losses, concatenated.
  std::vector<float> grads() {
    model.zero_grads(ctx);
    losses();
    model.backward(ctx, 1.0f);  // d(sum of losses)
    std::vector<float> g;
    for (const auto& p : model.buffers().params()) {
      Tensor t = model.buffers().get(p.grad);
      g.insert(g.end(), t.ptr<float>(), t.ptr<float>() + t.numel());
    }
    return g;
  }
};

// Three random coordinates (from `seed`) of every parameter: the analytic
// gradient of the summed losses, on the inputs as set, against central
// differences of the same sum.
inline void check_sampled_gradients(ModelRun& run, uint32_t seed) {
  run.grads();
  std::mt19937 rng(seed);
  int checked = 0;
  for (const auto& p : run.model.buffers().params()) {
    Tensor w = run.model.buffers().get(p.value), g = run.model.buffers().get(p.grad);
    const int64_t limit = p.spec.valid_rows >= 0 ? p.spec.valid_rows * w.size(-1) : w.numel();
    for (int k = 0; k < 3; ++k) {
      const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(limit));
      float* x = w.ptr<float>() + i;
      const float orig = *x, eps = 1e-2f * std::max(1.0f, std::fabs(orig));
      *x = orig + eps;
      const double up = run.loss_sum();
      *x = orig - eps;
      const double down = run.loss_sum();
      *x = orig;
      const double numeric = (up - down) / (double(orig + eps) - double(orig - eps));
      const double analytic = g.ptr<float>()[i];
      INFO(p.spec.name << "[" << i << "] analytic " << analytic << " numeric " << numeric);
      CHECK(std::fabs(analytic - numeric) <= 2e-3 + 2e-2 * std::fabs(numeric));
      ++checked;
    }
  }
  CHECK(checked >= 30);
}

}  // namespace trainer::testing
