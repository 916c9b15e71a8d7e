// [cuda][plan] A training step on the GPU takes exactly the op scratch the
// memory plan reserved: no growth, no request above it (which would throw),
// and the largest request is the one the plan sized. The plan sizes each op's
// largest path, which for a linear with a bias is the one without cuBLASLt's
// epilogues (fp32 scratch for the output); a second step takes those paths.
#include "engine/memory_plan.h"
#include "kernels/cuda/cuda_state.h"
#include "test/common/tiny_job.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {

TEST_CASE("a GPU training step uses the planned op scratch", "[cuda][plan]") {
  using engine::Family;
  for (Family family : {Family::gpt2, Family::llama}) {
    // bf16, 4 x 64 tokens: gpt2 with head dim 8 (unfused attention, c_fc's fp32
    // output without the epilogue the largest), llama with head dim 64 (fused, GQA).
    engine::JobSpec spec = testing::tiny_job(family, 2);
    spec.run.device = engine::DeviceKind::cuda;
    spec.precision.compute = engine::ComputeDtype::bf16;
    if (family == Family::llama) spec.model.d_model = 256;
    spec.model.d_ff = 256;
    spec.model.max_seq_len = spec.train.seq_len = 64;
    spec.train.micro_batch = 4;
    spec.train.global_batch = 4;
    engine::Trainer t(spec, testing::quiet_options());
    const engine::MemoryPlan& plan = t.plan();
    REQUIRE(plan.cuda);
    CudaState& st = *t.context().cuda;
    CHECK(st.scratch_bytes == plan.op_scratch);
    CHECK(st.scratch_fixed);
    // Its document layouts are in range by construction: no per-call check and sync.
    CHECK_FALSE(st.check_index_operands);
    testing::train_losses(t, 1, 2);
    INFO(engine::to_string(family) << ": peak request with the epilogues " << st.scratch_peak
                                   << ", planned " << plan.op_scratch);
    CHECK(st.scratch_peak <= plan.op_scratch);
    st.gemm_epilogues = false;
    testing::train_losses(t, 3, 4);
    st.gemm_epilogues = true;
    INFO(engine::to_string(family) << ": peak request " << st.scratch_peak << ", planned "
                                   << plan.op_scratch);
    CHECK(st.scratch_bytes == plan.op_scratch);
    CHECK(st.scratch_peak == plan.op_scratch);
    CHECK(t.allocated_bytes() == plan.total());
  }
}

}  // namespace trainer::cuda_test
