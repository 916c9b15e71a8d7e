#!/usr/bin/env bash
# From a fresh Debian machine to a model training on real text: installs what
# is missing, builds build/trainer, fetches and tokenizes the Brown corpus, and
# trains configs/default.yaml on the CPU (loss printed every step), then prints
# what the trained model writes after "The" (`trainer sample`).
# Extra arguments go to `trainer train` (e.g. --set train.steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ninja -C build trainer
scripts/get_data.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
build/trainer train configs/default.yaml "$@" 2>&1 | tee "$log"
# The run directory the job resolved to (a --set run.dir=... moves it).
run_dir=$(sed -n 's/.*; run directory //p' "$log" | tail -1)
if [[ -n $run_dir && -d $run_dir/checkpoints ]]; then
  echo "sample (trainer sample $run_dir --prompt \"The\" --tokens 48):"
  build/trainer sample "$run_dir" --prompt "The" --tokens 48
fi
