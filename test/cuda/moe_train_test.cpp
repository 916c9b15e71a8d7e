// [cuda][moe] A DeepSeek-V3-routed MoE job (sigmoid scores, group-limited,
// weights x 2.5, the aux_free bias and the sequence-wise balance loss) trains
// on the GPU as on the CPU: the same losses, aux losses and imbalance step by
// step, in fp32, with the op scratch the plan reserved (a request above it
// throws). The layer path, not only its ops: the per-sequence row table, the
// sums kept for the backward, the bias update.
#include <cmath>

#include "kernels/cuda/cuda_state.h"
#include "test/common/tiny_job.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {

TEST_CASE("an MoE job with DeepSeek-V3's balancing trains on the GPU as on the CPU",
          "[cuda][moe]") {
  engine::JobSpec spec = testing::tiny_job(engine::Family::llama, 3);
  spec.model.moe.enabled = true;
  spec.model.moe.n_experts = 8;
  spec.model.moe.top_k = 2;
  spec.model.moe.d_ff_expert = 16;
  spec.model.moe.n_shared_experts = 1;
  spec.model.moe.score = engine::RouterScore::sigmoid;
  spec.model.moe.n_groups = 4;
  spec.model.moe.top_groups = 2;
  spec.model.moe.topk_scaling_factor = 2.5;
  spec.model.moe.balance = engine::Balance::aux_free;
  spec.model.moe.bias_update_rate = 0.01;
  spec.model.moe.seq_aux_loss_coeff = 0.05;
  auto run = [&](engine::DeviceKind device) {
    engine::JobSpec s = spec;
    s.run.device = device;
    engine::Trainer t(s, testing::quiet_options());
    std::vector<engine::StepRecord> steps;
    for (int i = 1; i <= 3; ++i) steps.push_back(t.train_step(i));
    if (device == engine::DeviceKind::cuda) {
      const CudaState& st = *t.context().cuda;
      CHECK(st.scratch_fixed);
      CHECK(st.scratch_peak <= t.plan().op_scratch);
    }
    return steps;
  };
  const std::vector<engine::StepRecord> cpu_steps = run(engine::DeviceKind::cpu);
  const std::vector<engine::StepRecord> gpu_steps = run(engine::DeviceKind::cuda);
  for (size_t i = 0; i < cpu_steps.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(gpu_steps[i].loss == Approx(cpu_steps[i].loss).epsilon(1e-5));
    CHECK(gpu_steps[i].moe_aux_loss == Approx(cpu_steps[i].moe_aux_loss).epsilon(1e-5));
    CHECK(gpu_steps[i].moe_imbalance == cpu_steps[i].moe_imbalance);
    // The sequence-wise loss is on: at least its coefficient times a loss near 1.
    CHECK(cpu_steps[i].moe_aux_loss > 0.02);
  }
}

}  // namespace trainer::cuda_test
