// See job_mesh.h.
#include "cmd/job_mesh.h"

#include <cstdio>
#include <memory>

#include "cmd/input_error_report.h"
#include "engine/mesh_from_spec.h"
#include "kernels/error.h"
#include "parallel/launch_env.h"

namespace trainer::cmd {

int run_on_job_mesh(const std::string& job, const std::vector<std::string>& overrides,
                    const std::function<void(engine::JobSpec&)>& adjust,
                    const std::function<void(const engine::JobSpec&, parallel::Mesh&)>& body) {
  InputErrorReport errors(parallel::detect_launch_env());
  std::unique_ptr<parallel::Mesh> mesh;
  try {
    engine::JobSpec spec = engine::load_job_spec(job, overrides);
    if (adjust) adjust(spec);
    errors.set_watchdog_timeout(spec.parallel.timeout_s);
    mesh = engine::make_job_mesh(spec, errors.env());
    errors.set_mesh(mesh.get());
    error_rank() = mesh->rank();
    body(spec, *mesh);
  } catch (const InputError& e) {
    return errors.report(e.what());
  } catch (const std::exception& e) {
    if (!mesh) throw;  // before the mesh: main prints it
    std::fprintf(stderr, "trainer: failed: %s\n", e.what());
    std::fflush(stderr);
    mesh->abort(1);
    return 1;
  }
  return 0;
}

}  // namespace trainer::cmd
