// The list of not-yet-implemented features (remove a line when one lands).
// Empty for now: what the spec accepts, the loop runs. Features refused for
// one device or mesh only are refused where that is known (the trainer's
// setup (CUDA with several ranks or mixed precision) or by resolve_mesh
// (ZeRO-3, MoE capacity with context parallelism).
#include "engine/supported.h"

namespace trainer::engine {

void check_supported(const JobSpec&) {}

std::string check_plannable(const JobSpec& spec) {
  check_supported(spec);
  return "";
}

}  // namespace trainer::engine
