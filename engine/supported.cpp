// The list of not-yet-implemented features (remove a line when one lands).
#include "engine/supported.h"

#include <fmt/format.h>

#include "kernels/error.h"

namespace trainer::engine {

namespace {
void check_model(const JobSpec& spec) {
  const std::string& f = spec.source_path;
  // selective (Megatron: recompute the attention core) is what attention
  // always does here: it keeps only the log-sum-exp and recomputes the
  // probabilities in backward, so none and selective are the same plan.
  TRAINER_INPUT_CHECK(spec.parallel.recompute != Recompute::full,
                      "{}: parallel.recompute: full is not implemented yet (none or selective)", f);
}
}  // namespace

void check_supported(const JobSpec& spec) {
  check_model(spec);
}

std::string check_plannable(const JobSpec& spec) {
  check_model(spec);
  return "";
}

}  // namespace trainer::engine
