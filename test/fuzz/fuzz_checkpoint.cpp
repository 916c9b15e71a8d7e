// engine/checkpoint: a step directory whose checksums are right but whose
// metadata.json and shard are crafted (a hand edit, another version's writer)
// is refused with one line, or read: its step, job spec, and every tensor by
// the slice it says it holds. Input: as step_dir.h says.
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/slice.h"
#include "test/fuzz/fuzz_target.h"
#include "test/fuzz/step_dir.h"

using namespace trainer;
using namespace trainer::engine::checkpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = fuzz::write_step_dir(data, size);
  if (dir.empty()) return 0;
  fuzz::expect_only_input_errors([&] {
    (void)verify_checkpoint(dir);
    CheckpointReader reader(dir);
    (void)reader.step();
    (void)reader.job_spec();
    for (const std::string& name : reader.names()) {
      const Slice& saved = reader.any_slice(name);
      Slice whole = Slice::whole(saved.global_shape, saved.tp_dim, saved.valid_rows);
      if (whole.numel() > (1 << 20)) continue;
      std::vector<float> out(static_cast<size_t>(whole.numel()));
      reader.read(name, whole, out.data());
    }
  });
  return 0;
}
