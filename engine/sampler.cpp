// See sampler.h.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/slice.h"
#include "engine/single_rank.h"
#include "kernels/error.h"
#include "kernels/memory.h"
#include "model/rng.h"

namespace trainer::engine {

namespace {

void load_parameters(const checkpoint::CheckpointReader& reader, model::Buffers& buf) {
  std::vector<float> host;
  for (const auto& p : buf.params()) {
    const model::BufferInfo& info = buf.buffers()[p.value];
    checkpoint::Slice slice = checkpoint::local_slice(p.spec, info.shape, {});
    host.resize(static_cast<size_t>(slice.numel()));
    reader.read(p.spec.name, slice, host.data());
    copy_from_host(buf.get(p.value), host.data());
  }
}

// The next id from one row of logits (the first V of the padded row).
int32_t pick(const float* logits, int64_t V, const SampleOptions& o, uint64_t draw) {
  if (o.temperature <= 0) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = o.top_k > 0 ? std::min<int64_t>(o.top_k, V) : V;
  // Ties to the lower id, so the order (and the draw) never depends on the sort.
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> p(static_cast<size_t>(k));
  const double top = logits[ids[0]];
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += p[i] = std::exp((logits[ids[i]] - top) / o.temperature);
  // A uniform in [0, 1) from the counter RNG: one draw per generated token.
  const double u = double(draw >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (int64_t i = 0; i < k; ++i)
    if ((acc += p[i]) > u) return ids[i];
  return ids[k - 1];
}

}  // namespace

std::vector<int32_t> sample_continuation(const std::string& step_dir,
                                         const std::vector<int32_t>& prompt,
                                         const SampleOptions& o) {
  checkpoint::CheckpointReader reader(step_dir);
  const JobSpec saved = reader.job_spec();
  const int64_t V = saved.model.vocab_size, T = saved.model.max_seq_len;
  TRAINER_INPUT_CHECK(!prompt.empty(), "sample: the prompt has no tokens");
  TRAINER_INPUT_CHECK(o.tokens >= 1, "sample: --tokens must be at least 1, got {}", o.tokens);
  TRAINER_INPUT_CHECK(o.top_k >= 0, "sample: --top-k must be 0 (all) or more, got {}", o.top_k);
  for (int32_t id : prompt)
    TRAINER_INPUT_CHECK(id >= 0 && id < V, "sample: prompt token {} is outside the model's vocabulary of {}",
                        id, V);
  // The window is the model's whole context: one sequence of max_seq_len.
  std::unique_ptr<Trainer> trainer = single_rank_trainer(saved, static_cast<int>(T));
  model::Model& m = trainer->model();
  Context& ctx = trainer->context();
  load_parameters(reader, m.buffers());

  std::vector<int32_t> context(prompt), out;
  std::vector<int32_t> ids(static_cast<size_t>(T), 0), targets(static_cast<size_t>(T), -1);
  std::vector<float> logits;
  for (int i = 0; i < o.tokens; ++i) {
    // Causal attention: the padding after the context changes nothing before it.
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(context.size()), T);
    std::copy(context.end() - n, context.end(), ids.begin());
    std::fill(ids.begin() + n, ids.end(), 0);
    copy_from_host(m.input_ids(), ids.data());
    copy_from_host(m.targets(), targets.data());
    m.forward(ctx);
    Tensor all = m.logits(ctx);
    logits.resize(static_cast<size_t>(all.numel()));
    copy_to_host(logits.data(), all);
    const int64_t Vpad = all.size(1);
    const uint64_t draw = model::counter_bits(o.seed, 0x73616d706c65ull, static_cast<uint64_t>(i));
    const int32_t next = pick(logits.data() + (n - 1) * Vpad, V, o, draw);
    out.push_back(next);
    context.push_back(next);
    if (next == o.stop_id) break;
  }
  return out;
}

}  // namespace trainer::engine
