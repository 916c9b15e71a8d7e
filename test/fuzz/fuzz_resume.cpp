// checkpoint.resume: a whole Trainer resumes from a crafted step directory
// (checksums right, metadata.json and shard crafted, as step_dir.h says) of
// the seed's model (corpus/checkpoint/tiny_llama's job spec): refused with one
// line, or resumed, metadata scalars, data position and fp8 state included.
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/config/job_spec.h"
#include "engine/json.h"
#include "engine/trainer.h"
#include "test/common/tiny_job.h"
#include "test/fuzz/fuzz_target.h"
#include "test/fuzz/step_dir.h"

using namespace trainer;
using namespace trainer::engine;

namespace {

// The job the seed checkpoint was saved by, on the CPU.
JobSpec seed_job() {
  const std::string seed = TRAINER_SOURCE_DIR "/test/fuzz/corpus/checkpoint/tiny_llama";
  std::ifstream in(seed, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 2) fuzz::fail("cannot read " + seed);
  fuzz::InputCursor framed(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const Json meta = parse_json(framed.take_prefixed(), seed);
  JobSpec spec = parse_job_spec(meta.at("job_spec").as_string(), seed);
  spec.run.device = DeviceKind::cpu;
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const JobSpec base = seed_job();
  const std::string dir = fuzz::write_step_dir(data, size);
  if (dir.empty()) return 0;
  JobSpec spec = base;
  spec.checkpoint.resume = dir;
  // Resuming is part of writing a run directory (a private one, emptied each time).
  static const std::string run_dir = fuzz::write_input_file("run", nullptr, 0) + ".d";
  std::filesystem::remove_all(run_dir);
  spec.run.dir = run_dir;
  spec.checkpoint.dir = run_dir + "/checkpoints";
  TrainerOptions options = testing::quiet_options();
  options.write_run_dir = true;
  fuzz::expect_only_input_errors([&] {
    Trainer t(spec, options);
    if (t.start_step() < 0 || t.start_step() > spec.train.steps) fuzz::fail("resumed outside train.steps");
  });
  return 0;
}
