#!/usr/bin/env bash
# Builds a relocatable bundle (default build/bundle/ and build/bundle.tar.gz):
# the trainer, the unit-test binaries, every non-system shared library they
# need copied into lib/ with an $ORIGIN-relative RUNPATH, configs/, env.sh (finds
# the node's CUDA libraries), gpu_check.sh, a launcher and a README. CUDA
# libraries and the driver are never bundled. No MPI: one node, NCCL rendezvous.
# See scripts/BUNDLE.md.
#
# Usage: scripts/bundle.sh [--out DIR] [--build-dir DIR] [--cuda on|off|auto]
#                          [--max-mb N] [--jobs N]
#   --out        the bundle folder; the tarball is DIR.tar.gz (default build/bundle)
#   --build-dir  the build tree it configures and builds (default build-bundle)
#   --cuda       build the CUDA backend: auto (default) = when nvcc exists
#   --max-mb     fail when the bundle is larger (default 60, MB = 10^6 bytes)
#   --jobs       ninja parallelism (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

OUT=build/bundle
BUILD_DIR=build-bundle
CUDA=auto
MAX_MB=60
JOBS=2
die() { echo "bundle: $*" >&2; exit 1; }
usage_error() { echo "bundle: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --build-dir) BUILD_DIR=${2:?--build-dir needs a folder}; shift 2 ;;
    --cuda) CUDA=${2:?--cuda needs on, off or auto}; shift 2 ;;
    --max-mb) MAX_MB=${2:?--max-mb needs a number}; shift 2 ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $MAX_MB =~ ^[0-9]+$ ]] || usage_error "--max-mb: expected a whole number of MB, got '$MAX_MB'"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || usage_error "--jobs: expected a positive number, got '$JOBS'"
[[ $OUT = /* ]] || OUT=$ROOT/$OUT
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=$PATH:/usr/local/cuda/bin
fi
case $CUDA in
  auto) command -v nvcc >/dev/null && CUDA=ON || CUDA=OFF ;;
  on|ON) CUDA=ON ;;
  off|OFF) CUDA=OFF ;;
  *) usage_error "--cuda: expected on, off or auto, got '$CUDA'" ;;
esac

# patchelf rewrites RUNPATHs of the copied libraries (Debian's carry none, and a
# RUNPATH only covers its own object's dependencies, so each library needs one).
if ! command -v patchelf >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "bundle: installing patchelf"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null; } ||
      die "patchelf is missing and apt-get could not install it"
  else
    die "patchelf is missing: apt-get install patchelf"
  fi
fi
for tool in cmake ninja ldd strip objdump tar; do
  command -v $tool >/dev/null || die "$tool is missing"
done

# ---------------------------------------------------------------------- build
# MPI off: a node's Open MPI rarely matches ours and its plugins cannot be
# bundled sensibly; multi-GPU runs use NCCL's TCP rendezvous instead.
# No test/model: its binary ran nothing on a node (the GPU check never calls it)
# and, holding the CUDA kernels' device code as trainer does, cost 3.8 MB of
# the 60 MB, which new kernels then pushed past the limit.
TEST_DIRS="kernels;precision;parallel;cuda"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA="$CUDA" \
  -DTRAINER_MPI=OFF -DTRAINER_TESTS=ON "-DTRAINER_TEST_DIRS=$TEST_DIRS" >"$BUILD_DIR.cmake.log" 2>&1 ||
  { tail -20 "$BUILD_DIR.cmake.log"; die "cmake failed (log: $BUILD_DIR.cmake.log)"; }
rm -f "$BUILD_DIR.cmake.log"

# Binaries as paths under the build tree; bin/ mirrors them so gpu_check.sh runs
# with BUILD_DIR=<bundle>/bin. Optional ones are bundled when the build has them.
REQUIRED=(trainer test/kernels/test_kernels_cpu test/precision/test_precision)
OPTIONAL=(test/parallel/test_parallel test/cuda/cuda_ops_test test/precision/numeric_device_check
          test/parallel/parallel_nccl_smoke test/parallel/parallel_nccl_streams)
ALL_TARGETS=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null)
have_target() { grep -q "^$1: " <<<"$ALL_TARGETS"; }
BINARIES=("${REQUIRED[@]}")
for b in "${OPTIONAL[@]}"; do
  have_target "$(basename "$b")" && BINARIES+=("$b")
done
if [[ $CUDA == ON ]]; then
  have_target cuda_ops_test || die "a CUDA bundle needs test/cuda/cuda_ops_test, which this build lacks"
fi
targets=()
for b in "${BINARIES[@]}"; do targets+=("$(basename "$b")"); done
echo "bundle: building ${targets[*]} in $BUILD_DIR (cuda $CUDA, mpi off, -j$JOBS)"
ninja -C "$BUILD_DIR" -j "$JOBS" "${targets[@]}" >"$BUILD_DIR.ninja.log" 2>&1 ||
  { tail -30 "$BUILD_DIR.ninja.log"; die "build failed (log: $BUILD_DIR.ninja.log)"; }
rm -f "$BUILD_DIR.ninja.log"

# ----------------------------------------------------------------- libraries
# Found on every Linux node (glibc, the GCC runtime) or provided by the node's
# NVIDIA stack: never copied. libstdc++ stays the node's: Debian 12's needs
# glibc 2.36, while our binaries need only GLIBCXX_3.4.29 (GCC 11) and glibc
# 2.34, which RHEL 9 and Ubuntu 22.04 have (bundle.info records both).
is_system() {
  case $1 in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|\
    libutil.so*|libmvec.so*|libstdc++.so*|libgcc_s.so*) return 0 ;;
  esac
  return 1
}
is_cuda() {
  case $1 in
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*.so*|libnccl.so*|libnvrtc*.so*|\
    libnvJitLink.so*|libcufft*.so*|libcurand.so*|libcusparse*.so*|libcusolver*.so*|libnvidia-*.so*|\
    libnvToolsExt.so*|libcupti.so*|libnvperf*.so*) return 0 ;;
  esac
  return 1
}

STAGE="$OUT.tmp.$$"
rm -rf "$STAGE"
trap 'rm -rf "$STAGE" "$OUT.tar.gz.tmp.$$"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/configs" "$STAGE/scripts"

declare -A LIBS=()  # soname -> path on this machine
for b in "${BINARIES[@]}"; do
  src="$BUILD_DIR/$b"
  [[ -x $src ]] || die "built $b but $src is missing"
  # ldd lists the whole closure, so libraries' own dependencies come along.
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    is_system "$name" && continue
    is_cuda "$name" && continue
    [[ $path == not ]] && die "$b needs $name, which this machine does not have either"
    LIBS[$name]=$path
  done < <(ldd "$src")
  dest="$STAGE/bin/$b"
  mkdir -p "$(dirname "$dest")"
  cp "$src" "$dest"
  strip "$dest"
  # $ORIGIN climbs from bin/ or bin/test/<folder>/ to the bundle's lib/.
  up=$(dirname "$b" | awk -F/ '$0 == "." { print ".."; next } { s = ".."; for (i = 0; i < NF; i++) s = s "/.."; print s }')
  patchelf --set-rpath "\$ORIGIN/$up/lib" "$dest"
done
for name in "${!LIBS[@]}"; do
  cp -L "${LIBS[$name]}" "$STAGE/lib/$name"
  chmod u+w "$STAGE/lib/$name"
  # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
  patchelf --set-rpath '$ORIGIN' "$STAGE/lib/$name"
done

# The oldest glibc and libstdc++ this bundle runs on: the newest symbol versions
# any bundled file needs (env.sh compares glibc's with the node's).
newest_version() {  # newest_version PREFIX: the highest PREFIXx.y.z referenced
  find "$STAGE/bin" "$STAGE/lib" -type f ! -name '*.sh' -exec objdump -T {} + 2>/dev/null |
    grep -o "${1}[0-9][0-9.]*[0-9]" | sed "s/^$1//" | sort -t. -k1,1n -k2,2n -k3,3n | tail -1
}
GLIBC_REQUIRED=$(newest_version GLIBC_)
GLIBCXX_REQUIRED=$(newest_version GLIBCXX_)

# ------------------------------------------------------------- the rest
cp configs/*.yaml "$STAGE/configs/"
# The GPU check with its stage table (and the CPU references' maker, which
# reads the same table); scripts/GPU_CHECK.md says how they are used.
cp scripts/gpu_check.sh scripts/gpu_stages.sh scripts/gpu_refs.sh scripts/GPU_CHECK.md "$STAGE/scripts/"
# The Hugging Face load check gpu_check runs where Python has transformers.
cp scripts/hf_check.sh scripts/hf_check.py "$STAGE/scripts/"
cp scripts/bundle_env.sh "$STAGE/env.sh"
cp scripts/bundle_launch.sh "$STAGE/bin/launch.sh"
cp scripts/BUNDLE.md "$STAGE/README.md"
chmod +x "$STAGE/env.sh" "$STAGE/bin/launch.sh"
# The commit baked in at build time (others may have committed since), with
# +dirty.<hash of git diff HEAD> when the tree had local edits.
commit=$("$BUILD_DIR/trainer" --version 2>/dev/null | awk 'NR == 1 { print $2 }')
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo yes || echo no)
{
  echo "commit=${commit:-unknown}"
  echo "uncommitted_changes_in_tree=$dirty"
  # shellcheck disable=SC1091  # the build machine's os-release
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}" | tr ' ' _)"
  echo "cuda=$CUDA"
  echo "cuda_architectures=$("$BUILD_DIR/trainer" --version 2>/dev/null | sed -n 's/^cuda architectures: //p')"
  echo "mpi=OFF"
  echo "glibc_required=${GLIBC_REQUIRED:-unknown}"
  echo "glibcxx_required=${GLIBCXX_REQUIRED:-none}"
  echo "binaries=${BINARIES[*]}"
  echo "bundled_libs=$(printf '%s\n' "${!LIBS[@]}" | sort | tr '\n' ' ' | sed 's/ $//')"
} >"$STAGE/bundle.info"

# ------------------------------------------------------------------- size
bytes=$(du -sb "$STAGE" | cut -f1)
mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }')
if ((bytes >= MAX_MB * 1000000)); then
  echo "bundle: largest files:" >&2
  find "$STAGE" -type f -printf '%s %P\n' | sort -rn | head -8 | awk '{ printf "  %6.1f MB  %s\n", $1 / 1e6, $2 }' >&2
  die "the bundle is $mb MB, over the ${MAX_MB} MB limit"
fi

rm -rf "$OUT"
mv "$STAGE" "$OUT"
tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz.tmp.$$" "$(basename "$OUT")"
mv "$OUT.tar.gz.tmp.$$" "$OUT.tar.gz"
tar_mb=$(awk -v b="$(stat -c %s "$OUT.tar.gz")" 'BEGIN { printf "%.1f", b / 1e6 }')
echo "bundle: $OUT ($mb MB, limit $MAX_MB MB; tarball $OUT.tar.gz $tar_mb MB)"
echo "bundle: bundled libraries: $(sed -n 's/^bundled_libs=//p' "$OUT/bundle.info")"
echo "bundle: needs glibc >= ${GLIBC_REQUIRED:-unknown} and libstdc++ with GLIBCXX_${GLIBCXX_REQUIRED:-?}, CUDA libraries and driver from the node (env.sh finds them)"
