#!/usr/bin/env bash
# Builds everything and runs every test through ctest (unit tests, multi-rank
# tests under mpirun, end-to-end runs). Installs what is missing first.
# CUDA tests are reported as skipped where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh
# Every multi-rank test runs its ranks on this one host. Left to choose, Open MPI
# first tries the cm layer's fabric transports (psm2, ofi) before settling on
# ob1 over shared memory, which costs each mpirun about 0.2 s here; and hwloc's
# I/O discovery (PCI config space, OpenCL, GL, CUDA, NVML plugins) in mpirun and
# every rank another 0.04 s, for topology no test binds by. The suite starts
# hundreds of mpiruns. Values set by the caller are kept.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export HWLOC_COMPONENTS=${HWLOC_COMPONENTS:--pci,-linuxio,-opencl,-gl,-cuda,-nvml}
ninja -C build
# The real-text tests need the Brown corpus and GPT-2's vocabulary.
scripts/get_data.sh
(cd build && ctest --output-on-failure --timeout 900 "$@")
# The CUDA backend again, built against the host CUDA emulator (test/cuda_emu)
# with AddressSanitizer on the kernels: its [cuda] suite, the emulator's own
# tests (out-of-bounds accesses among them) and the GPU-vs-CPU training
# comparison run here whether or not a GPU exists. TRAINER_EMULATOR=0 skips it.
if [[ ${TRAINER_EMULATOR:-1} != 0 ]]; then
  # Also reconfigures a build-emu/ made before the ASan option, or without MPI
  # (which carries the emulated NCCL between GPU ranks).
  if ! grep -qs '^TRAINER_CUDA_EMULATOR_ASAN:BOOL=ON$' build-emu/CMakeCache.txt ||
     ! grep -qs '^TRAINER_MPI:BOOL=ON$' build-emu/CMakeCache.txt; then
    cmake -S . -B build-emu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA_EMULATOR=ON \
      -DTRAINER_CUDA_EMULATOR_ASAN=ON -DTRAINER_MPI=ON "-DTRAINER_TEST_DIRS=cuda;cuda_emu;e2e"
  fi
  # Everything the emulator build defines: every cuda-labelled entry's program.
  ninja -C build-emu
  # Each entry's emulated kernels run on one thread (a launch's fibers share
  # it): two entries at a time use both of CI's cores, which pays for the
  # CPU time ASan adds (about 1.7x).
  (cd build-emu && ctest -j2 --output-on-failure --timeout 900 -L cuda)
fi
echo "test.sh: finished in $(( $(date +%s) - start )) s"
