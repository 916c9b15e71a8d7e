// A single-rank MoE layer with its arenas bound and random parameters, for the tests.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "model/moe_layer.h"
#include "parallel/communicator.h"

namespace trainer::test {

struct MoeHarness {
  Context ctx;
  model::Buffers buf;
  model::Moe moe;
  std::unique_ptr<parallel::Communicator> tp = parallel::make_single_communicator("tp");
  std::vector<std::vector<char>> arenas;
  int64_t N, C;
  std::vector<float> in, out, dout, dinp;

  // `sequences` split the tokens (the sequence-wise balance loss sees them).
  MoeHarness(model::Family family, const model::MoeConfig& mc, int64_t tokens, int64_t C_,
             uint64_t seed, int64_t sequences = 1)
      : N(tokens), C(C_), in(N * C), out(N * C), dout(N * C), dinp(N * C) {
    model::ModelConfig cfg;
    cfg.family = family;
    cfg.d_model = static_cast<int>(C);
    cfg.n_layer = 2;
    moe.declare(buf, "model.layers.0", cfg, mc, model::BatchShape{sequences, tokens / sequences});
    for (int c = 0; c < model::kNumCategories; ++c) {
      arenas.emplace_back(buf.category_bytes(static_cast<model::Category>(c)) + 256, 0);
      char* base = arenas.back().data();
      base += (256 - reinterpret_cast<uintptr_t>(base) % 256) % 256;
      buf.bind(static_cast<model::Category>(c), base, Device::cpu);
    }
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (const auto& p : buf.params()) {
      Tensor w = buf.get(p.value);
      // Router spread wide so the top-k choice is clear; experts moderate.
      const bool router = p.spec.name.find("gate.weight") != std::string::npos;
      const bool bias = p.spec.init == model::Init::zeros;
      for (int64_t i = 0; i < w.numel(); ++i)
        w.ptr<float>()[i] = bias ? 0.0f : nd(rng) * (router ? 0.7f : 0.4f);
    }
    for (auto& x : in) x = nd(rng);
    for (auto& x : dout) x = nd(rng);
  }

  model::LayerEnv env() { return {ctx, buf, *tp}; }
  Tensor t(std::vector<float>& v) { return Tensor(v.data(), {N, C}); }
  void forward() { moe.forward(env(), t(out), t(in)); }
  // The tested objective: sum(out * dout) + aux_loss, in double.
  double objective() {
    forward();
    double s = 0;
    for (int64_t i = 0; i < N * C; ++i) s += double(out[i]) * dout[i];
    return s + moe.aux_loss(buf);
  }
  void zero_grads() {
    for (const auto& p : buf.params()) {
      Tensor g = buf.get(p.grad);
      std::fill(g.ptr<float>(), g.ptr<float>() + g.numel(), 0.0f);
    }
  }
  void backward() { moe.backward(env(), t(dinp), t(dout), t(in), 1.0f); }
};

}  // namespace trainer::test
