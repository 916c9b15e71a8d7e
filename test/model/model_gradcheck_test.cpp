// Whole-model gradient check: the analytic gradient of the summed token loss
// of a tiny GPT-2, a tiny Llama (GQA, untied), a Qwen2-style Llama (q/k/v
// biases, tied) and a Qwen3-style one (q/k norms) against central finite
// differences of the same loss,
// evaluated in double from the per-token losses.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/memory.h"
#include "model/model.h"
#include "test/common/host_arenas.h"

using namespace trainer;
using namespace trainer::model;

namespace {

struct Harness {
  Context ctx;
  Model model;
  testing::HostArenas arenas;

  Harness(const ModelConfig& cfg, BatchShape batch) : model(cfg, batch), arenas(model.buffers()) {
    model.init_parameters(ctx);
    std::mt19937 rng(7);
    const int64_t N = batch.B * batch.T;
    int32_t* ids = model.input_ids().ptr<int32_t>();
    int32_t* tg = model.targets().ptr<int32_t>();
    for (int64_t i = 0; i < N; ++i) {
      ids[i] = static_cast<int32_t>(rng() % cfg.vocab_size);
      tg[i] = static_cast<int32_t>(rng() % cfg.vocab_size);
    }
  }

  double loss() {
    model.forward(ctx);
    Tensor l = model.losses(ctx);
    double s = 0;
    for (int64_t i = 0; i < l.numel(); ++i) s += l.ptr<float>()[i];
    return s;
  }
};

void check_model_gradients(const ModelConfig& cfg) {
  Harness h(cfg, BatchShape{2, 5});
  h.model.zero_grads(h.ctx);
  h.loss();
  h.model.backward(h.ctx, 1.0f);  // d(sum of losses)

  std::mt19937 rng(11);
  int checked = 0;
  for (const auto& p : h.model.buffers().params()) {
    Tensor w = h.model.buffers().get(p.value);
    Tensor g = h.model.buffers().get(p.grad);
    int64_t limit = p.spec.valid_rows >= 0 ? p.spec.valid_rows * w.size(-1) : w.numel();
    for (int k = 0; k < 3; ++k) {
      int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(limit));
      float* x = w.ptr<float>() + i;
      const float orig = *x;
      const float eps = 1e-2f * std::max(1.0f, std::fabs(orig));
      *x = orig + eps;
      double up = h.loss();
      *x = orig - eps;
      double down = h.loss();
      *x = orig;
      double numeric = (up - down) / (double(*x + eps) - double(*x - eps));
      double analytic = g.ptr<float>()[i];
      INFO(p.spec.name << "[" << i << "] analytic " << analytic << " numeric " << numeric);
      CHECK(std::fabs(analytic - numeric) <= 2e-3 + 2e-2 * std::fabs(numeric));
      ++checked;
    }
  }
  CHECK(checked >= 30);
}

}  // namespace

TEST_CASE("gpt2 model gradients match finite differences", "[cpu][model]") {
  ModelConfig cfg;
  cfg.family = Family::gpt2;
  cfg.n_layer = 2;
  cfg.d_model = 16;
  cfg.n_head = 4;
  cfg.n_kv_head = 4;
  cfg.d_ff = 32;
  cfg.vocab_size = 50;
  cfg.max_seq_len = 8;
  cfg.tie_embeddings = true;
  cfg.init_std = 0.2f;  // larger weights make every path's gradient visible
  check_model_gradients(cfg);
}

namespace {

// A tiny Llama with GQA (4 query, 2 KV heads), untied.
ModelConfig tiny_llama() {
  ModelConfig cfg;
  cfg.family = Family::llama;
  cfg.n_layer = 2;
  cfg.d_model = 16;
  cfg.n_head = 4;
  cfg.n_kv_head = 2;
  cfg.d_ff = 24;
  cfg.vocab_size = 50;
  cfg.max_seq_len = 8;
  cfg.tie_embeddings = false;
  cfg.init_std = 0.2f;
  return cfg;
}

}  // namespace

TEST_CASE("llama model gradients match finite differences", "[cpu][model]") {
  check_model_gradients(tiny_llama());
}

TEST_CASE("qwen2-style llama (q/k/v biases, tied head) gradients match finite differences",
          "[cpu][model]") {
  ModelConfig cfg = tiny_llama();
  cfg.qkv_bias = cfg.tie_embeddings = true;
  check_model_gradients(cfg);
}

TEST_CASE("qwen3-style llama (q/k norms per head, heads wider than d_model / n_head, tied head) "
          "gradients match finite differences", "[cpu][model]") {
  ModelConfig cfg = tiny_llama();
  cfg.qk_norm = cfg.tie_embeddings = true;
  cfg.head_size = 8;  // 4 heads of 8 over a width of 16
  check_model_gradients(cfg);
}
