// Mesh: created once at start-up from the launch environment and the resolved
// MeshShape; holds this rank's coordinates, one communicator per axis (tp, cp,
// dp, pp, ep, edp, dp_cp, world) and the collective watchdog they share.
#pragma once

#include <array>
#include <memory>

#include "parallel/communicator.h"
#include "parallel/launch_env.h"
#include "parallel/mesh_shape.h"
#include "parallel/watchdog.h"

namespace trainer::parallel {

class Mesh {
 public:
  // Collective over every launched rank (all must call it with the same shape).
  // One rank: single-rank communicators. Several CPU ranks: MPI (refused with
  // InputError in a build without MPI). Several GPU ranks: NCCL (refused in a
  // build without it). Groups of one rank get a single-rank communicator.
  Mesh(const LaunchEnv& env, const MeshShape& shape, Device device, double timeout_s = 600.0);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  const Coords& coords() const { return coords_; }
  const LaunchEnv& env() const { return env_; }
  int rank() const { return coords_.rank; }
  Device device() const { return device_; }
  // Rank 0 logs; every other rank stays quiet.
  bool logs() const { return coords_.rank == 0; }
  Communicator& comm(Axis axis) { return *comms_[static_cast<int>(axis)]; }
  // What carries the collectives: "NCCL", "MPI", or "" for a world of one.
  const char* transport() const;
  Watchdog& watchdog() { return *watchdog_; }

  // For the error path of cmd/: aborts every communicator, then MPI_Abort(code)
  // when MPI is running (never returns then: mpirun ends every rank). Without
  // MPI it returns and the caller exits with `code` itself.
  void abort(int code) noexcept;

 private:
  void abort_communicators() noexcept;

  LaunchEnv env_;
  MeshShape shape_;
  Coords coords_;
  Device device_;
  std::array<std::unique_ptr<Communicator>, kNumAxes> comms_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace trainer::parallel
