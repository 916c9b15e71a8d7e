// A check for the MPI test programs: prints rank, file:line and what failed, then aborts the job.
#pragma once

#include <cstdio>
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
