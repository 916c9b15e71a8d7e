// Prints the commit, build type and compiled CUDA architectures. The CUDA
// issue extends this with the cuBLAS/cuDNN/NCCL versions found at run time.
#include "cmd/version.h"

#include <fmt/format.h>

namespace trainer::cmd {

void print_version() {
  fmt::print("trainer {} ({} build)\n", TRAINER_GIT_COMMIT, TRAINER_BUILD_TYPE);
  fmt::print("cuda architectures: {}\n", TRAINER_CUDA_ARCHS);
}

}  // namespace trainer::cmd
