// The list of not-yet-implemented features (remove a line when one lands).
#include "engine/supported.h"

#include <fmt/format.h>

#include "kernels/error.h"

namespace trainer::engine {

namespace {
void check_model(const JobSpec& spec) {
  const std::string& f = spec.source_path;
  TRAINER_INPUT_CHECK(!spec.model.moe.enabled,
                      "{}: model.moe: mixture-of-experts layers are not wired into the model yet "
                      "(remove the moe: block for a dense model)",
                      f);
  TRAINER_INPUT_CHECK(spec.parallel.recompute == Recompute::none,
                      "{}: parallel.recompute: {} is not implemented yet (none only)", f,
                      to_string(spec.parallel.recompute));
}
}  // namespace

void check_supported(const JobSpec& spec) {
  TRAINER_INPUT_CHECK(spec.precision.compute == ComputeDtype::fp32,
                      "{}: precision.compute: {} is not wired into training yet (fp32 only; the "
                      "bf16/fp16/fp8 formats and scalers exist but the layers do not use them)",
                      spec.source_path, to_string(spec.precision.compute));
  check_model(spec);
}

std::string check_plannable(const JobSpec& spec) {
  check_model(spec);
  if (spec.precision.compute == ComputeDtype::fp32) return "";
  return fmt::format("note: precision.compute {} is not wired into training yet; this plan sizes "
                     "every buffer in fp32",
                     to_string(spec.precision.compute));
}

}  // namespace trainer::engine
