// engine/config: any YAML text (and --set overrides: the lines after a line
// "@@") is refused with one line naming the key, or
// gives a spec whose resolved YAML (job.yaml in every run directory) parses
// back to the same spec, whose mesh resolves or is refused for a few world
// sizes, and whose model config can be derived.
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/mesh_from_spec.h"
#include "engine/model_from_spec.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(fuzz::as_text(data, size));
  std::vector<std::string> overrides;
  if (size_t at = text.find("\n@@\n"); at != std::string::npos) {
    for (size_t b = at + 4, e; b < text.size(); b = e + 1) {
      e = text.find('\n', b);
      if (e == std::string::npos) e = text.size();
      overrides.push_back(text.substr(b, e - b));
    }
    text.resize(at + 1);
  }
  engine::JobSpec spec;
  bool ok = false;
  fuzz::expect_only_input_errors([&] {
    spec = engine::parse_job_spec(text, "fuzz.yaml", overrides);
    ok = true;
  });
  if (!ok) return 0;
  std::string yaml = engine::job_spec_to_yaml(spec);
  fuzz::expect_only_input_errors([&] {
    engine::JobSpec again = engine::parse_job_spec(yaml, "resolved.yaml");
    again.source_path = spec.source_path;
    if (!(again == spec)) fuzz::fail("the resolved YAML parses to another spec:\n" + yaml);
  });
  for (int world : {1, 2, 8, 96}) {
    fuzz::expect_only_input_errors([&] {
      (void)engine::resolve_job_mesh(spec, world);
      (void)engine::model_config(spec);
      (void)engine::micro_batch_shape(spec);
    });
  }
  return 0;
}
