// MPI_Bcast or the TCP rendezvous for the NCCL unique id (see bootstrap.h).
#include "parallel/bootstrap.h"

#include "kernels/error.h"
#include "parallel/tcp_rendezvous.h"

#if TRAINER_MPI
#include <mpi.h>

#include "parallel/mpi_communicator.h"
#endif

namespace trainer::parallel {

Bootstrapped bootstrap_broadcast(const LaunchEnv& env, const std::vector<uint8_t>& payload,
                                 double timeout_s) {
  Bootstrapped out;
  if (env.world == 1) {
    out.bytes = payload;
    out.via = "none";
    return out;
  }
#if TRAINER_MPI
  // Under a launcher MPI does not know, MPI_Init makes each process a world
  // of one: the ranks would each keep their own id and NCCL's init would hang.
  mpi_init_once();
  if (mpi_world_size() == env.world) {
    TRAINER_CHECK(mpi_world_rank() == env.rank,
                  "bootstrap: MPI says rank {} but the launch environment ({}) says rank {}",
                  mpi_world_rank(), env.launcher, env.rank);
    int n = static_cast<int>(payload.size());
    TRAINER_CHECK(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD) == MPI_SUCCESS,
                  "bootstrap: MPI_Bcast of the payload size failed");
    out.bytes = payload;
    out.bytes.resize(static_cast<size_t>(n));
    TRAINER_CHECK(MPI_Bcast(out.bytes.data(), n, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS,
                  "bootstrap: MPI_Bcast of {} bytes failed", n);
    out.via = "MPI_Bcast";
    return out;
  }
#endif
  const RendezvousAddress addr = rendezvous_address(env);
  out.bytes = tcp_broadcast(addr.host, addr.port, env.rank, env.world, payload, timeout_s);
  out.via = "tcp " + addr.host + ":" + std::to_string(addr.port);
  return out;
}

}  // namespace trainer::parallel
