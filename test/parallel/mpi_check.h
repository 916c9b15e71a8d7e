// A check for the MPI test programs: prints rank, file:line and what failed, then aborts the job.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "parallel/mpi_communicator.h"

#define MPI_TEST_CHECK(cond, rank)                                                             \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "rank %d: check failed at %s:%d: %s\n", (rank), __FILE__, __LINE__, \
                   #cond);                                                                     \
      std::fflush(stderr);                                                                     \
      ::trainer::parallel::mpi_abort(1);                                                       \
    }                                                                                          \
  } while (0)

// Runs body; an exception is a failure of this rank (and so of the job).
template <class F>
int run_mpi_test(F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uncaught: %s\n", e.what());
    std::fflush(stderr);
    ::trainer::parallel::mpi_abort(1);
    return 1;
  }
  return 0;
}

// The stalled-rank programs' (mpi_stall, cuda_emu's nccl_stall) arguments:
// the watchdog timeout (argv[1], default 2 s) and the rank that never joins
// (TRAINER_TEST_STALL_RANK, read only by these tests; -1: none).
struct StallTest {
  double timeout_s = 2.0;
  int stall_rank = -1;
};
inline StallTest stall_test(int argc, char** argv) {
  StallTest t;
  if (argc > 1) t.timeout_s = std::atof(argv[1]);
  if (const char* stall = std::getenv("TRAINER_TEST_STALL_RANK")) t.stall_rank = std::atoi(stall);
  return t;
}
