#!/usr/bin/env bash
# From a fresh Debian machine to a model training on real text: installs what
# is missing, builds build/trainer, fetches and tokenizes the Brown corpus, and
# trains configs/default.yaml on the CPU (loss printed every step).
# Extra arguments go to `trainer train` (e.g. --set train.steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ninja -C build trainer
scripts/get_data.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
exec build/trainer train configs/default.yaml "$@"
