// How rank 0's bytes (the NCCL unique id) reach every rank before any
// communicator exists: MPI_Bcast when this build has MPI and MPI sees the
// whole launched world (mpirun, srun with PMI), else the TCP rendezvous at
// rendezvous_address(env) (a build without MPI, or a launcher MPI does not
// know, such as the bundle's launch.sh, under which every MPI process is a
// singleton).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/launch_env.h"

namespace trainer::parallel {

struct Bootstrapped {
  std::vector<uint8_t> bytes;  // rank 0's payload, on every rank
  std::string via;             // "MPI_Bcast", "tcp host:port" or "none" (one rank)
};

// Collective over the launched world: rank 0 passes the payload (the others'
// is ignored). Throws Error naming the address when the rendezvous fails or
// times out (timeout_s).
Bootstrapped bootstrap_broadcast(const LaunchEnv& env, const std::vector<uint8_t>& payload,
                                 double timeout_s);

}  // namespace trainer::parallel
