// Sampling from a checkpoint: greedy decoding follows the trained model's own
// argmax, a fixed seed gives the same text, top-k 1 is greedy, and bad
// prompts are refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/sampler.h"
#include "engine/trainer.h"
#include "kernels/error.h"
#include "kernels/memory.h"
#include "parallel/communicator.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
namespace fs = std::filesystem;

namespace {

// The trained model's argmax after `context` (the first max_seq_len tokens of
// every row of its own micro-batch), computed by the training Trainer itself.
int32_t argmax_after(Trainer& t, const std::vector<int32_t>& context, int64_t V) {
  model::Model& m = t.model();
  const int64_t T = m.batch().T, rows = m.batch().B;
  std::vector<int32_t> ids(static_cast<size_t>(rows * T), 0);
  for (int64_t r = 0; r < rows; ++r) std::copy(context.begin(), context.end(), ids.begin() + r * T);
  copy_from_host(m.input_ids(), ids.data());
  copy_from_host(m.targets(), ids.data());
  m.forward(t.context());
  Tensor x = m.logits(t.context());
  std::vector<float> h(static_cast<size_t>(x.numel()));
  copy_to_host(h.data(), x);
  const float* row = h.data() + (context.size() - 1) * x.size(1);
  return static_cast<int32_t>(std::max_element(row, row + V) - row);
}

}  // namespace

TEST_CASE("sample: greedy follows the model, seeds repeat, top-k 1 is greedy", "[cpu][engine]") {
  fs::path dir = testing::fresh_temp_dir("sample");
  JobSpec spec = testing::tiny_job(Family::llama, 3);
  spec.run.dir = dir.string();
  spec.optimizer.lr = 1e-2;
  Trainer a(spec, testing::quiet_options());
  testing::train_losses(a, 1, 3);
  auto world = parallel::make_single_communicator("world");
  checkpoint::Checkpointer(spec, *world, Device::cpu, {}, nullptr)
      .save(3, a.model().buffers(), a.optimizer());
  const std::string step_dir = checkpoint::resolve_checkpoint(dir.string(), nullptr);

  const std::vector<int32_t> prompt = {5, 17, 42};
  SampleOptions greedy;
  greedy.temperature = 0;
  greedy.tokens = 8;  // 3 + 8 <= max_seq_len 16: no window shift
  std::vector<int32_t> g = sample_continuation(step_dir, prompt, greedy);
  REQUIRE(g.size() == 8);
  std::vector<int32_t> context = prompt;
  for (int32_t id : g) {
    CHECK(id == argmax_after(a, context, spec.model.vocab_size));
    context.push_back(id);
  }

  SampleOptions top1;
  top1.top_k = 1;
  top1.tokens = 8;
  CHECK(sample_continuation(step_dir, prompt, top1) == g);

  SampleOptions s;
  s.tokens = 20;  // past the 16-token window: the context slides
  std::vector<int32_t> x = sample_continuation(step_dir, prompt, s), y = sample_continuation(step_dir, prompt, s);
  CHECK(x == y);
  s.seed = 99;
  CHECK(sample_continuation(step_dir, prompt, s) != x);

  CHECK_THROWS_AS(sample_continuation(step_dir, {}, s), InputError);
  CHECK_THROWS_WITH(sample_continuation(step_dir, {5, 200}, s),
                    "sample: prompt token 200 is outside the model's vocabulary of 200");
  fs::remove_all(dir);
}
