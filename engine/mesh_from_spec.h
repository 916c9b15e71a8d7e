// The bridge from the job spec to the parallel mesh (parallel/ never sees YAML).
#pragma once

#include <memory>

#include "engine/config/job_spec.h"
#include "parallel/launch_env.h"
#include "parallel/mesh.h"
#include "parallel/mesh_shape.h"

namespace trainer::engine {

parallel::MeshRequest mesh_request(const JobSpec& spec, int world);
// resolve_mesh with the job file named in its error line.
parallel::MeshShape resolve_job_mesh(const JobSpec& spec, int world);
// This process's mesh for the job: its launch environment (one rank when
// launched alone), the job's validated shape, and the device run.device picks.
std::unique_ptr<parallel::Mesh> make_job_mesh(const JobSpec& spec,
                                              const parallel::LaunchEnv& env = {});

}  // namespace trainer::engine
