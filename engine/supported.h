// What this build of the trainer can run today. The job spec accepts every
// documented key; features not yet built are refused here, in one place,
// with one line naming the key, so no job silently trains something else.
#pragma once

#include <string>

#include "engine/config/job_spec.h"

namespace trainer::engine {

// Throws InputError for the first requested feature that is not implemented.
void check_supported(const JobSpec& spec);
// For `trainer plan`: the same checks; returns a note to print (empty when none).
std::string check_plannable(const JobSpec& spec);

}  // namespace trainer::engine
