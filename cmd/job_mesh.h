// The frame of the subcommands that run a job on its mesh (train, evaluate):
// the spec read, the mesh built, bad input reported once for the job (exit 2,
// InputErrorReport), a runtime failure printed by the rank that met it and
// the whole job brought down (exit 1).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"
#include "parallel/mesh.h"

namespace trainer::cmd {

// adjust: changes the read spec before the mesh is built (may throw an
// InputError); body: the work, on every rank. Returns the exit code.
int run_on_job_mesh(const std::string& job, const std::vector<std::string>& overrides,
                    const std::function<void(engine::JobSpec&)>& adjust,
                    const std::function<void(const engine::JobSpec&, parallel::Mesh&)>& body);

}  // namespace trainer::cmd
