// Text from a checkpoint: a one-rank fp32 CPU model of the checkpoint's
// architecture (saved on any mesh: every tensor is read by global name) that
// continues a prompt token by token. There is no KV cache: each new token
// runs the whole window again, which keeps one code path with training and
// is fast enough to look at what a small model learned (the quickstart
// prints a sample; `trainer sample` prints more).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::engine {

struct SampleOptions {
  int tokens = 64;           // new tokens to generate (>= 1)
  double temperature = 1.0;  // 0 = greedy (argmax); > 0 divides the logits
  int top_k = 40;            // sample among the k most likely ids; 0 = all
  uint64_t seed = 1234;      // same seed, prompt and checkpoint: same text
  int stop_id = -1;          // stop after generating this id (e.g. <|endoftext|>); -1 = never
};

// The prompt's continuation (new ids only). The window is the model's
// max_seq_len: a longer context keeps its last max_seq_len tokens.
// InputError for an empty prompt or an id outside the model's vocabulary.
std::vector<int32_t> sample_continuation(const std::string& step_dir,
                                         const std::vector<int32_t>& prompt,
                                         const SampleOptions& options);

}  // namespace trainer::engine
