// The list of not-yet-implemented features (remove a line when one lands).
// What the spec accepts, the loop runs, except the ZeRO-3 combinations below. Features refused for
// one device or mesh only are refused where that is known (the trainer's
// setup (CUDA with several ranks or mixed precision) or by resolve_mesh
// (MoE capacity with context parallelism). ZeRO-3's refusals that need the
// model are here.
#include "engine/supported.h"

#include "kernels/error.h"

namespace trainer::engine {

void check_supported(const JobSpec& spec) {
  if (spec.parallel.zero != 3) return;
  // The import writes whole parameters, where ZeRO-3 keeps only the block being run.
  TRAINER_INPUT_CHECK(spec.model.init_from.empty(),
                      "{}: model.init_from with parallel.zero: 3 is not supported yet (import with "
                      "zero 0, 1 or 2 and resume its checkpoint with zero 3)",
                      spec.source_path);
}

std::string check_plannable(const JobSpec& spec) {
  check_supported(spec);
  return "";
}

}  // namespace trainer::engine
