// The MPI runtime (init once, finalize at exit, abort) and the MPI
// Communicator for CPU ranks. Every function exists in a build without MPI;
// there, mpi_available() is false and the others refuse with an Error.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace trainer::parallel {

bool mpi_available();
// MPI_Init_thread (MPI_THREAD_MULTIPLE requested, so the watchdog thread may
// call MPI_Abort) the first time; MPI_Finalize runs at exit unless aborted.
void mpi_init_once();
int mpi_world_rank();
int mpi_world_size();
// MPI_Abort(MPI_COMM_WORLD, code) when MPI is initialised; otherwise returns.
void mpi_abort(int code) noexcept;

// A duplicate of MPI_COMM_WORLD, errors returned (thrown) rather than fatal.
std::unique_ptr<Communicator> make_mpi_world(std::string name = "world");
// MPI_Comm_split of an MPI communicator: collective over `parent`; ranks with
// equal color form a group ordered by key.
std::unique_ptr<Communicator> mpi_split(Communicator& parent, int color, int key,
                                        std::string name);

}  // namespace trainer::parallel
