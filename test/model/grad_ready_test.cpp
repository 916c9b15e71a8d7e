// The gradient-ready hook (Model::set_grad_ready): each parameter reported
// once per backward, its gradient already final when reported (unchanged by
// the rest of backward), and the gradients changed after backward (pipeline
// tied tables, sequence-parallel norms, replicated KV heads) never reported.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <vector>

#include "model/model.h"
#include "test/common/host_arenas.h"

using namespace trainer;
using namespace trainer::model;

namespace {

ModelConfig tiny(Family f) {
  ModelConfig cfg;
  cfg.family = f;
  cfg.n_layer = 3;
  cfg.d_model = 16;
  cfg.n_head = 2;
  cfg.n_kv_head = f == Family::llama ? 1 : 2;
  cfg.d_ff = 32;
  cfg.vocab_size = 40;
  cfg.max_seq_len = 8;
  cfg.tie_embeddings = f == Family::gpt2;
  return cfg;
}

std::vector<float> host_copy(const Tensor& t) {
  return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
}

// Two micro-batches, the hook on the second; returns param -> gradient when reported.
std::map<int, std::vector<float>> run(Model& m, Context& ctx, bool has_head) {
  std::mt19937 rng(3);
  const int64_t N = m.batch().B * m.batch().T;
  m.init_parameters(ctx);
  m.zero_grads(ctx);
  std::map<int, std::vector<float>> reported;
  for (int mb = 0; mb < 2; ++mb) {
    if (m.config().first_stage)
      for (int64_t i = 0; i < N; ++i) m.input_ids().ptr<int32_t>()[i] = int32_t(rng() % 40);
    else
      for (int64_t i = 0; i < m.stage_input().numel(); ++i) m.stage_input().ptr<float>()[i] = 0.01f * float(rng() % 100);
    if (has_head)
      for (int64_t i = 0; i < N; ++i) m.targets().ptr<int32_t>()[i] = int32_t(rng() % 40);
    else
      for (int64_t i = 0; i < m.stage_output_grad().numel(); ++i)
        m.stage_output_grad().ptr<float>()[i] = 0.01f * float(rng() % 100) - 0.5f;
    m.forward(ctx);
    if (mb == 1)
      m.set_grad_ready([&](int p) {
        REQUIRE(reported.count(p) == 0);
        reported[p] = host_copy(m.buffers().get(m.buffers().params()[p].grad));
      });
    m.backward(ctx, 0.25f);
    m.set_grad_ready({});
  }
  for (const auto& [p, g] : reported) {
    INFO(m.buffers().params()[p].spec.name);
    CHECK(g == host_copy(m.buffers().get(m.buffers().params()[p].grad)));
  }
  return reported;
}

}  // namespace

TEST_CASE("grad-ready hook: every gradient of a whole model, final when reported", "[cpu][model]") {
  for (Family f : {Family::gpt2, Family::llama}) {
    Context ctx;
    Model m(tiny(f), BatchShape{2, 4});
    testing::HostArenas arenas(m.buffers());
    const auto reported = run(m, ctx, true);
    CHECK(reported.size() == m.buffers().params().size());
  }
}

TEST_CASE("grad-ready hook: a pipeline-split tied table and its copy are left out", "[cpu][model]") {
  ModelConfig first = tiny(Family::gpt2), last = tiny(Family::gpt2);
  first.layer_begin = 0;
  first.layer_end = 2;
  first.last_stage = false;
  last.layer_begin = 2;
  last.layer_end = 3;
  last.first_stage = false;
  for (const ModelConfig& cfg : {first, last}) {
    Context ctx;
    Model m(cfg, BatchShape{2, 4});
    testing::HostArenas arenas(m.buffers());
    const auto reported = run(m, ctx, cfg.last_stage);
    int left_out = 0;
    for (int p = 0; p < static_cast<int>(m.buffers().params().size()); ++p) {
      const ParamSpec& s = m.buffers().params()[p].spec;
      const bool table = s.name == "transformer.wte.weight";
      CHECK(reported.count(p) == (table ? 0u : 1u));
      CHECK(m.grad_final_after_backward(p) == !table);
      left_out += table;
    }
    CHECK(left_out == 1);
  }
}

TEST_CASE("grad-ready hook: sequence-parallel norms and replicated KV heads are left out", "[cpu][model]") {
  ModelConfig cfg = tiny(Family::llama);
  cfg.tp = 2;
  cfg.sequence_parallel = true;  // n_kv_head 1 < tp: the KV head is on both ranks
  Model m(cfg, BatchShape{2, 4});
  int norms = 0, kv = 0, others = 0;
  for (int p = 0; p < static_cast<int>(m.buffers().params().size()); ++p) {
    const ParamSpec& s = m.buffers().params()[p].spec;
    const bool later = s.sp_partial || s.tp_replicas > 1;
    CHECK(m.grad_final_after_backward(p) == !later);
    norms += s.sp_partial;
    kv += s.tp_replicas > 1;
    others += !later;
  }
  CHECK(norms == 2 * cfg.n_layer + 1);
  CHECK(kv > 0);
  CHECK(others > 0);
}
