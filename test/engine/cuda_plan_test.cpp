// The memory plan of a job on the CUDA backend: the layers' op scratch (the
// largest temporary any of their CUDA ops takes, kernels/op_scratch.h) and
// cuBLASLt's workspace, on top of the arenas; computed without a GPU.
#include <catch2/catch.hpp>

#include "engine/config/job_spec.h"
#include "engine/memory_plan.h"
#include "engine/model_from_spec.h"
#include "engine/optimizer.h"
#include "kernels/op_scratch.h"
#include "model/model.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;

namespace {

struct Plans {
  MemoryPlan cpu, cuda;
};

Plans plans(const JobSpec& spec) {
  model::Model m(model_config(spec), micro_batch_shape(spec));
  AdamW opt(spec.optimizer, m.buffers());
  return {plan_memory(m.buffers(), opt), plan_memory(m.buffers(), opt, 0, 1, {}, Device::cuda)};
}

// gpt2 in bf16, 4 x 64 tokens, d_ff 256: the MLP's c_fc forward writes its
// (256, 256) output through fp32 scratch (its fp32 bias), the largest request:
// attention (head dim 8: unfused) takes 2 * ((4, 64, 64) fp32 + bf16) = 196608,
// the embedding's sort 138240.
JobSpec bf16_gpt2() {
  JobSpec spec = testing::tiny_job(Family::gpt2, 1);
  spec.run.device = DeviceKind::cuda;
  spec.precision.compute = ComputeDtype::bf16;
  spec.model.d_ff = 256;
  spec.model.max_seq_len = spec.train.seq_len = 64;
  spec.train.micro_batch = 4;
  spec.train.global_batch = 4;
  return spec;
}

}  // namespace

TEST_CASE("a cuda plan adds op scratch and the cuBLASLt workspace", "[cpu][engine][plan]") {
  const Plans p = plans(bf16_gpt2());
  CHECK_FALSE(p.cpu.cuda);
  CHECK(p.cpu.op_scratch == 0);
  CHECK(p.cuda.cuda);
  CHECK(p.cuda.op_scratch == 256 * 256 * 4);
  CHECK(p.cuda.gemm_workspace == size_t{32} << 20);
  CHECK(p.cuda.total() == p.cpu.total() + p.cuda.op_scratch + p.cuda.gemm_workspace);
  const std::string table = p.cuda.describe();
  CHECK_THAT(table, Catch::Contains("op scratch") && Catch::Contains("cuBLASLt ws") &&
                        Catch::Contains("the CUDA backend's"));
  CHECK_THAT(p.cpu.describe(), !Catch::Contains("op scratch"));
}

TEST_CASE("op scratch follows the op the shapes make largest", "[cpu][engine][plan]") {
  JobSpec spec = bf16_gpt2();
  spec.model.d_ff = 64;  // c_fc's 65536 bytes: now attention's backward is the largest
  CHECK(plans(spec).cuda.op_scratch == 2 * (4 * 64 * 64 * 4 + 4 * 64 * 64 * 2));
  spec.model.d_model = 256;  // head dim 64: fused attention, a (4, 4, 64) delta only;
  spec.model.d_ff = 1024;    // c_fc's (256, 1024) fp32 output again
  CHECK(plans(spec).cuda.op_scratch == 256 * 1024 * 4);
  // fp32: no bias scratch; the embedding's sort of 256 ids (138240) just over
  // the unfused attention's fp32 P and dP (131072).
  spec.precision.compute = ComputeDtype::fp32;
  CHECK(plans(spec).cuda.op_scratch == 138240);
  CHECK(embedding_backward_scratch_bytes(256) == 138240);
}

TEST_CASE("run.attention: unfused plans the unfused scores; fused refuses what it cannot take",
          "[cpu][engine][plan]") {
  // Head dim 64 in bf16 over 512 tokens: the fused kernels apply, so auto and
  // fused plan a linear's fp32 output ((512, 256), the largest request
  // left), and unfused the (1, 512, 512) scores, 6x that.
  JobSpec spec = bf16_gpt2();
  spec.model.d_model = 256;
  spec.model.d_ff = 64;
  spec.model.max_seq_len = spec.train.seq_len = 512;
  spec.train.micro_batch = spec.train.global_batch = 1;
  auto cuda_plan = [](const JobSpec& s) {
    model::ModelConfig cfg = model_config(s);
    apply_device(cfg, s, Device::cuda);
    model::Model m(cfg, micro_batch_shape(s));
    AdamW opt(s.optimizer, m.buffers());
    return plan_memory(m.buffers(), opt, 0, 1, {}, Device::cuda);
  };
  const size_t fused = cuda_plan(spec).op_scratch;
  CHECK(fused == 512 * 256 * 4);
  spec.run.attention = AttentionKind::fused;
  CHECK(cuda_plan(spec).op_scratch == fused);
  spec.run.attention = AttentionKind::unfused;
  const AttentionShape shape{1, 512, 512, 4, 4, 64, DType::bf16};
  CHECK(attention_scratch_bytes(shape, false) == 2 * (512 * 512 * 4 + 512 * 512 * 2));
  CHECK(cuda_plan(spec).op_scratch == attention_scratch_bytes(shape, false));
  CHECK(attention_scratch_bytes(shape) == 0 + attention_backward_scratch_bytes(shape, true));
  // fused where they do not apply (fp32 attention) is bad input, naming the key.
  spec.run.attention = AttentionKind::fused;
  spec.precision.compute = ComputeDtype::fp32;
  CHECK_THROWS_WITH(cuda_plan(spec), Catch::Contains("run.attention: fused") &&
                                         Catch::Contains("fp32 attention and head dim 64"));
  // The CPU has one attention: nothing to refuse there.
  model::ModelConfig cpu = model_config(spec);
  CHECK_NOTHROW(apply_device(cpu, spec, Device::cpu));
}
