// check_consistency: the cross-field rules of a job spec (after each key's own type and range).
#pragma once

#include "engine/config/job_spec.h"
#include "engine/config/spec_reader.h"

namespace trainer::engine::spec {

// Throws InputError naming the key that breaks a rule between keys. World-size
// rules (dp, tp dividing heads, ...) are the mesh's, checked when the world is known.
void check_consistency(const JobSpec& spec, const SpecReader& r);

}  // namespace trainer::engine::spec
