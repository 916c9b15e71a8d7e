// Out-of-line part of error.h: the failure path stays out of hot loops.
#include "kernels/error.h"

namespace trainer {

int& error_rank() {
  static int rank = 0;
  return rank;
}

void throw_check_failure(const char* expr, const char* file, int line,
                         const std::string& message) {
  throw Error(fmt::format("rank {}: {} (check `{}` failed at {}:{})", error_rank(), message,
                          expr, file, line));
}

}  // namespace trainer
