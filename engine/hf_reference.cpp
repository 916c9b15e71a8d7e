// See hf_reference.h.
#include "engine/hf_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_interop.h"
#include "engine/model_from_spec.h"
#include "engine/single_rank.h"
#include "kernels/error.h"
#include "kernels/memory.h"

namespace trainer::engine {

namespace fs = std::filesystem;

void write_hf_reference(const std::string& step_dir, const std::string& hf_dir, int tokens,
                        FILE* log) {
  checkpoint::CheckpointReader reader(step_dir);
  JobSpec saved = reader.job_spec();
  TRAINER_INPUT_CHECK(tokens >= 1, "--reference-tokens: expected at least 1 token, got {}", tokens);
  const int T = std::min(tokens, saved.model.max_seq_len);
  // Mixtral computes every token's experts: the reference is dropless too,
  // whatever capacity the job trained with.
  saved.model.moe.capacity_factor.reset();
  std::unique_ptr<Trainer> owned = single_rank_trainer(saved, T);
  Trainer& trainer = *owned;
  const JobSpec& spec = trainer.spec();
  model::Model& m = trainer.model();
  checkpoint::load_hf_weights(hf_dir, model_config(spec), m.buffers(), trainer.context());

  // Ids spread over the whole vocabulary (a stride coprime with any V that
  // is not a multiple of 7919), so every row of the embedding can matter.
  const int64_t V = spec.model.vocab_size;
  std::vector<int32_t> ids(static_cast<size_t>(T)), targets(ids.size());
  for (int t = 0; t < T; ++t) {
    ids[t] = static_cast<int32_t>((int64_t{t} * 7919 + 13) % V);
    targets[t] = static_cast<int32_t>((int64_t{t} * 7919 + 7932) % V);
  }
  copy_from_host(m.input_ids(), ids.data());
  copy_from_host(m.targets(), targets.data());
  m.forward(trainer.context());
  Tensor logits = m.logits(trainer.context());
  TRAINER_CHECK(logits.dtype == DType::f32 && logits.size(0) == T,
                "reference logits: the model has no fp32 lm_head.logits of {} rows", T);
  const int64_t Vpad = logits.size(1);
  std::vector<float> padded(static_cast<size_t>(T * Vpad));
  copy_to_host(padded.data(), logits);
  std::string bytes(static_cast<size_t>(T * V) * sizeof(float), '\0');
  for (int t = 0; t < T; ++t)
    std::memcpy(bytes.data() + size_t(t) * V * sizeof(float), padded.data() + size_t(t) * Vpad,
                size_t(V) * sizeof(float));

  std::string json = "{\n  \"ids\": [";
  for (int t = 0; t < T; ++t) json += fmt::format("{}{}", t ? ", " : "", ids[t]);
  json += fmt::format(
      "],\n  \"vocab_size\": {},\n  \"logits\": \"reference_logits.f32\",\n"
      "  \"dtype\": \"float32\",\n  \"shape\": [{}, {}],\n  \"step\": {},\n"
      "  \"note\": \"logits of this export on ids, computed by trainer on one CPU rank in fp32\"\n}}\n",
      V, T, V, reader.step());
  checkpoint::replace_file_atomically((fs::path(hf_dir) / "reference_logits.f32").string(), bytes);
  checkpoint::replace_file_atomically((fs::path(hf_dir) / "reference.json").string(), json);
  if (log)
    fmt::print(log, "reference logits of {} tokens: {}/reference.json, reference_logits.f32\n", T,
               hf_dir);
}

}  // namespace trainer::engine
