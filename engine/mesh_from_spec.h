// The bridge from the job spec to the parallel mesh (parallel/ never sees YAML).
#pragma once

#include "engine/config/job_spec.h"
#include "parallel/mesh_shape.h"

namespace trainer::engine {

parallel::MeshRequest mesh_request(const JobSpec& spec, int world);
// resolve_mesh with the job file named in its error line.
parallel::MeshShape resolve_job_mesh(const JobSpec& spec, int world);

}  // namespace trainer::engine
