// JobSpec -> MeshRequest -> MeshShape (all mesh rules live in resolve_mesh).
#include "engine/mesh_from_spec.h"

#include "engine/device.h"
#include "kernels/error.h"

namespace trainer::engine {

parallel::MeshRequest mesh_request(const JobSpec& spec, int world) {
  parallel::MeshRequest r;
  const ParallelSpec& p = spec.parallel;
  r.world = world;
  r.tp = p.tp;
  r.pp = p.pp;
  r.cp = p.cp;
  r.ep = p.ep;
  r.dp = p.dp;
  r.zero = p.zero;
  r.virtual_stages = p.virtual_stages;
  r.sequence_parallel = p.sequence_parallel;
  r.n_layer = spec.model.n_layer;
  r.n_head = spec.model.n_head;
  r.n_kv_head = spec.model.n_kv_head > 0 ? spec.model.n_kv_head : spec.model.n_head;
  r.n_experts = spec.model.moe.enabled ? spec.model.moe.n_experts : 0;
  r.global_batch = spec.train.global_batch;
  r.micro_batch = spec.train.micro_batch;
  if (spec.train.rampup_batch_size) {
    r.rampup_start = spec.train.rampup_batch_size->start;
    r.rampup_increment = spec.train.rampup_batch_size->increment;
  }
  r.seq_len = spec.train.seq_len;
  return r;
}

parallel::MeshShape resolve_job_mesh(const JobSpec& spec, int world) {
  parallel::MeshShape shape;
  try {
    shape = parallel::resolve_mesh(mesh_request(spec, world));
  } catch (const InputError& e) {
    throw InputError(spec.source_path + ": " + e.what());
  }
  return shape;
}

std::unique_ptr<parallel::Mesh> make_job_mesh(const JobSpec& spec, const parallel::LaunchEnv& env) {
  return std::make_unique<parallel::Mesh>(env, resolve_job_mesh(spec, env.world),
                                          resolve_device(spec), spec.parallel.timeout_s);
}

}  // namespace trainer::engine
