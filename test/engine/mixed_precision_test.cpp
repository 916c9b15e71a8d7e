// Mixed precision in the training loop: each dtype's memory plan, bf16/fp16/fp8
// training close to fp32, fp16 overflow skipping the update and backing the
// loss scale off, and fp8 scales moving with the amax history.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <cstring>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/trainer.h"
#include "kernels/numeric.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;

namespace {

JobSpec job(Family family, ComputeDtype compute, int steps = 8) {
  JobSpec s = testing::tiny_job(family, steps);
  s.precision.compute = compute;
  s.precision.fp8_first_last_bf16 = false;  // two layers: otherwise no fp8 GEMM at all
  return s;
}

// All fp32 parameters of the model, copied out.
std::vector<float> parameters(Trainer& t) {
  std::vector<float> out;
  const model::Buffers& b = t.model().buffers();
  for (const auto& p : b.params()) {
    Tensor v = b.get(p.value);
    const float* d = static_cast<const float*>(v.data);
    out.insert(out.end(), d, d + v.numel());
  }
  return out;
}

Tensor token_table(Trainer& t) {
  const model::Buffers& b = t.model().buffers();
  for (const auto& p : b.params())
    if (p.spec.name == "transformer.wte.weight") return b.get(p.value);
  FAIL("no token table");
  return {};
}

}  // namespace

TEST_CASE("the memory plan stores activations and weight copies in the compute dtype",
          "[cpu][engine][precision]") {
  using model::Category;
  auto plan = [](ComputeDtype c) {
    Trainer t(job(Family::llama, c), testing::quiet_options());
    return t.plan();
  };
  MemoryPlan f32 = plan(ComputeDtype::fp32), bf16 = plan(ComputeDtype::bf16),
             f16 = plan(ComputeDtype::fp16);
  const int A = static_cast<int>(Category::activations), W = static_cast<int>(Category::compute_weights),
            P = static_cast<int>(Category::parameters);
  CHECK(f32.category[W] == 0);
  // Every matrix gets a 2-byte copy: about half the fp32 parameter bytes
  // (the vectors, norms, stay fp32 only; alignment pads each buffer).
  CHECK(bf16.category[W] > 0.4 * bf16.category[P]);
  CHECK(bf16.category[W] < 0.55 * bf16.category[P]);
  CHECK(f16.category[W] == bf16.category[W]);
  // Activations: 2 bytes each except the fp32 statistics (lse, rstd, losses).
  CHECK(bf16.category[A] < 0.6 * f32.category[A]);
  CHECK(bf16.category[A] > 0.45 * f32.category[A]);
  CHECK(bf16.category[P] == f32.category[P]);
  CHECK(bf16.optimizer == f32.optimizer);
}

TEST_CASE("bf16, fp16 and fp8 train close to fp32", "[cpu][engine][precision]") {
  for (Family f : {Family::gpt2, Family::llama}) {
    Trainer ref(job(f, ComputeDtype::fp32), testing::quiet_options());
    std::vector<double> want = testing::train_losses(ref, 1, 8);
    for (ComputeDtype c : {ComputeDtype::bf16, ComputeDtype::fp16, ComputeDtype::fp8}) {
      INFO("family " << int(f) << " compute " << to_string(c));
      Trainer t(job(f, c), testing::quiet_options());
      std::vector<double> got = testing::train_losses(t, 1, 8);
      // Not equal (the arithmetic differs) but close: 8-bit mantissas on the
      // activations move a ~5.3 loss by a few 1e-3; fp8 operands by ~1e-2.
      double tol = c == ComputeDtype::fp8 ? 5e-2 : 2e-2;
      bool differs = false;
      for (size_t i = 0; i < want.size(); ++i) {
        CHECK(std::abs(got[i] - want[i]) < tol);
        differs = differs || got[i] != want[i];
      }
      CHECK(differs);  // the compute dtype really is in use
    }
  }
}

TEST_CASE("fp16: an overflow skips the update and halves the loss scale",
          "[cpu][engine][precision]") {
  Trainer t(job(Family::gpt2, ComputeDtype::fp16), testing::quiet_options());
  StepRecord r1 = t.train_step(1);
  CHECK_FALSE(r1.skipped);
  CHECK(r1.loss_scale == 65536.0);
  // One token-table entry beyond fp16's range: its compute copy is inf, so the
  // forward (and every gradient) is non-finite.
  Tensor wte = token_table(t);
  float* w = static_cast<float*>(wte.data);
  const float saved = w[5];
  w[5] = 1e6f;
  t.model().refresh_compute_weights(t.context());
  std::vector<float> before = parameters(t);
  StepRecord r2 = t.train_step(2);
  CHECK(r2.skipped);
  CHECK(r2.loss_scale == 65536.0);
  CHECK(std::isnan(r2.grad_norm));
  std::vector<float> after = parameters(t);
  CHECK(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0);
  w[5] = saved;
  t.model().refresh_compute_weights(t.context());
  StepRecord r3 = t.train_step(3);
  CHECK_FALSE(r3.skipped);
  CHECK(r3.loss_scale == 32768.0);
  CHECK(std::isfinite(r3.loss));
  CHECK(std::isfinite(r3.grad_norm));
}

TEST_CASE("fp8: every block GEMM operand gets a scale from its amax", "[cpu][engine][precision]") {
  JobSpec spec = job(Family::llama, ComputeDtype::fp8);
  spec.precision.fp8_amax_history = 4;
  Trainer t(spec, testing::quiet_options());
  const Fp8Scaling* f = t.model().buffers().fp8();
  REQUIRE(f != nullptr);
  // Two layers x 7 linears (q, k, v, o, gate, up, down) x 3 operands.
  REQUIRE(f->size() == 2 * 7 * 3);
  for (int i = 0; i < f->size(); ++i) CHECK(f->scale(i) == 1.0f);
  t.train_step(1);
  // Before the copy back, the host state is still the one uploaded at start:
  // training reads and writes only the plan's fp8 state.
  for (int i = 0; i < f->size(); ++i) CHECK(f->scale(i) == 1.0f);
  t.model().buffers().fp8_state_to_host();
  for (int i = 0; i < f->size(); ++i) {
    // After one step: scale = fp8_max / amax of that step (margin 0).
    float amax = f->history(spec.precision.fp8_amax_history - 1, i);
    REQUIRE(amax > 0);
    CHECK(f->scale(i) == Approx(fp8_max(f->format(i)) / amax).epsilon(1e-6));
    CHECK(f->history(0, i) == 0.0f);
  }
  // fp8_first_last_bf16 (the default) leaves a two-layer model no fp8 GEMM.
  spec.precision.fp8_first_last_bf16 = true;
  Trainer t2(spec, testing::quiet_options());
  CHECK(t2.model().buffers().fp8()->size() == 0);
}

TEST_CASE("fp8: every routed and shared expert GEMM has its own scaling", "[cpu][engine][precision]") {
  JobSpec spec = job(Family::llama, ComputeDtype::fp8);
  spec.model.moe.enabled = true;
  spec.model.moe.n_experts = 4;
  spec.model.moe.d_ff_expert = 32;
  spec.model.moe.n_shared_experts = 1;
  Trainer t(spec, testing::quiet_options());
  const model::Buffers& b = t.model().buffers();
  const Fp8Scaling* f = b.fp8();
  REQUIRE(f != nullptr);
  // Two layers x (4 attention linears + 4 experts x 3 + the shared expert's 3) x 3
  // operands; the router stays in bf16.
  REQUIRE(f->size() == 2 * (4 + 4 * 3 + 3) * 3);
  int experts = 0;
  for (int i = 0; i < f->size(); ++i) {
    const std::string& name = b.fp8_names()[i];
    const bool routed = name.find(".experts.") != std::string::npos;
    CHECK(b.fp8_expert(i) == routed);
    experts += routed;
  }
  CHECK(experts == 2 * 4 * 3 * 3);
  CHECK(std::find(b.fp8_names().begin(), b.fp8_names().end(),
                  "model.layers.1.block_sparse_moe.experts.3.w2.grad_output") != b.fp8_names().end());
  t.train_step(1);
  // The bound state keeps the routed experts' operands after the dense ones,
  // so each reduction group's amaxes are one range.
  using Ops = model::Buffers::Fp8Operands;
  const Tensor dense = b.fp8_amaxes(Ops::dense), routed = b.fp8_amaxes(Ops::experts);
  CHECK(routed.numel() == experts);
  CHECK(dense.numel() + routed.numel() == f->size());
  CHECK(static_cast<float*>(routed.data) == static_cast<float*>(dense.data) + dense.numel());
  for (int i = 0; i < f->size(); ++i) {
    const float* slot = static_cast<float*>(b.fp8_amax(i).data);
    const Tensor& range = b.fp8_expert(i) ? routed : dense;
    CHECK(slot >= static_cast<float*>(range.data));
    CHECK(slot < static_cast<float*>(range.data) + range.numel());
  }
  CHECK(t.plan().fp8_state ==
        (size_t(spec.precision.fp8_amax_history) + 3) * size_t(f->size()) * sizeof(float));
  CHECK(t.allocated_bytes() == t.plan().total());
  b.fp8_state_to_host();
  // Every expert got tokens in the step's micro-batches: each operand's scale moved.
  for (int i = 0; i < f->size(); ++i) {
    INFO(b.fp8_names()[i]);
    CHECK(f->scale(i) != 1.0f);
  }
}
