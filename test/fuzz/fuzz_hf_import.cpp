// engine/checkpoint/hf_interop (model.init_from): a crafted Hugging Face
// directory (config.json, model.safetensors, or a sharded index) is refused
// with one line naming the file and tensor, or loaded into a tiny
// LlamaForCausalLM-shaped model (test/checkpoint/hf_fixtures/llama's shape).
//
// Input: byte 0 bit 0 = sharded (model.safetensors.index.json naming
// model-00001-of-00001.safetensors); bytes 1-2 = config.json's length, then
// config.json; sharded: 2 bytes of the index's length, then the index; the
// rest is the safetensors file.
#include <filesystem>

#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_config.h"
#include "engine/checkpoint/hf_interop.h"
#include "engine/model_from_spec.h"
#include "engine/trainer.h"
#include "test/common/tiny_job.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;
using namespace trainer::engine;
namespace fs = std::filesystem;

namespace {

JobSpec llama_job() {
  JobSpec s = testing::tiny_job(Family::llama, 1);
  s.model.vocab_size = 200;
  s.model.n_kv_head = 2, s.model.d_ff = 48;
  s.model.norm_eps = 1e-6, s.model.rope_theta = 500000.0;
  s.train.micro_batch = s.train.global_batch = 1;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const JobSpec spec = llama_job();
  static Trainer trainer(spec, testing::quiet_options());
  if (size < 1) return 0;
  const bool sharded = data[0] & 1;
  fuzz::InputCursor in(data + 1, size - 1);
  const std::string_view config = in.take_prefixed();
  const std::string_view index = sharded ? in.take_prefixed() : std::string_view();
  const std::string_view weights = in.rest();

  const fs::path dir = fuzz::write_input_file("hf", nullptr, 0) + ".d";
  fs::remove_all(dir);
  fs::create_directories(dir);
  checkpoint::write_file_durably((dir / "config.json").string(), config);
  if (sharded) {
    checkpoint::write_file_durably((dir / "model.safetensors.index.json").string(), index);
    checkpoint::write_file_durably((dir / "model-00001-of-00001.safetensors").string(), weights);
  } else {
    checkpoint::write_file_durably((dir / "model.safetensors").string(), weights);
  }
  fuzz::expect_only_input_errors([&] {
    const model::ModelConfig cfg = model_config(spec);
    checkpoint::check_hf_config((dir / "config.json").string(), cfg);
    checkpoint::load_hf_weights(dir.string(), cfg, trainer.model().buffers(), trainer.context());
  });
  return 0;
}
