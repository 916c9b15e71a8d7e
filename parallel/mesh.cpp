// Mesh construction: the world communicator, then one split per axis (see mesh.h).
#include "parallel/mesh.h"

#include "kernels/error.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

namespace trainer::parallel {

Mesh::Mesh(const LaunchEnv& env, const MeshShape& shape, Device device, double timeout_s)
    : env_(env), shape_(shape), device_(device) {
  TRAINER_INPUT_CHECK(env.world == shape.world,
                      "parallel: the mesh was resolved for world {} but the launcher ({}) "
                      "started {} ranks",
                      shape.world, env.launcher, env.world);
  TRAINER_INPUT_CHECK(timeout_s > 0, "parallel.timeout_s: {} must be positive", timeout_s);
  coords_ = coords_of(shape, env.rank);
  error_rank() = env.rank;
  watchdog_ = std::make_unique<Watchdog>(timeout_s, env.rank, [this] {
    abort_communicators();
    mpi_abort(kWatchdogExitCode);
  });

  const int world_idx = static_cast<int>(Axis::world);
  if (shape.world == 1) {
    for (Axis axis : kAllAxes) {
      comms_[static_cast<int>(axis)] = make_single_communicator(
          axis_name(axis), device == Device::cpu ? nullptr : cuda_device_copy);
    }
  } else if (device == Device::cpu) {
    TRAINER_INPUT_CHECK(mpi_available(),
                        "parallel: {} ranks were launched ({}) but this build has no MPI; "
                        "install libopenmpi-dev and rebuild, or run one rank",
                        env.world, env.launcher);
    // Guarded like a collective: a rank that never arrives must not hang the rest.
    CollectiveGuard guard(watchdog_.get(), "world", "MPI_Init/MPI_Comm_dup", env.rank, env.world);
    comms_[world_idx] = make_mpi_world(axis_name(Axis::world));
    Communicator& world = *comms_[world_idx];
    TRAINER_INPUT_CHECK(world.size() == env.world && world.rank() == env.rank,
                        "parallel: MPI reports rank {} of {} but the launch environment ({}) "
                        "says rank {} of {}",
                        world.rank(), world.size(), env.launcher, env.rank, env.world);
  } else {
    TRAINER_INPUT_CHECK(nccl_available(),
                        "parallel: {} GPU ranks were launched ({}) but this build has no NCCL; "
                        "rebuild with CUDA and NCCL, or run one rank",
                        env.world, env.launcher);
    comms_[world_idx] = make_nccl_world(env, timeout_s);
  }

  if (shape.world > 1) {
    Communicator& world = *comms_[world_idx];
    // Every rank creates the groups in the same order (required by both
    // MPI_Comm_split and ncclCommSplit); the split color is the group id and
    // the key the coordinate along the axis, so group rank == coordinate.
    for (Axis axis : kAllAxes) {
      if (axis == Axis::world) continue;
      std::unique_ptr<Communicator>& slot = comms_[static_cast<int>(axis)];
      if (shape.size(axis) == 1) {
        slot = make_single_communicator(axis_name(axis),
                                        device == Device::cpu ? nullptr : cuda_device_copy);
        continue;
      }
      const int color = group_id(shape, axis, env.rank);
      const int key = coords_.along(axis);
      CollectiveGuard guard(watchdog_.get(), axis_name(axis), "comm_split", key,
                            shape.size(axis));
      slot = device == Device::cpu ? mpi_split(world, color, key, axis_name(axis))
                                   : nccl_split(world, color, key, axis_name(axis), timeout_s);
      TRAINER_CHECK(slot->size() == shape.size(axis) && slot->rank() == key,
                    "axis {}: split gave rank {} of {}, expected {} of {}", axis_name(axis),
                    slot->rank(), slot->size(), key, shape.size(axis));
    }
  }
  for (auto& comm : comms_) comm->set_watchdog(watchdog_.get());
}

Mesh::~Mesh() {
  // The watchdog goes first: its thread must not poll communicators being freed.
  watchdog_.reset();
  for (int i = kNumAxes - 1; i >= 0; --i) comms_[i].reset();
}

const char* Mesh::transport() const {
  if (shape_.world == 1) return "";
  return is_nccl(*comms_[static_cast<int>(Axis::world)]) ? "NCCL" : "MPI";
}

void Mesh::abort_communicators() noexcept {
  for (auto& comm : comms_) {
    if (comm) comm->abort();
  }
  nccl_abort_all();  // also the groups the mesh does not own (KV replicas)
}

void Mesh::abort(int code) noexcept {
  abort_communicators();
  mpi_abort(code);
}

}  // namespace trainer::parallel
