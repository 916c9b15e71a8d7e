#!/usr/bin/env bash
# Builds everything and runs every test through ctest (unit tests, multi-rank
# tests under mpirun, end-to-end runs). Installs what is missing first.
# CUDA tests are reported as skipped where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh
ninja -C build
# The real-text tests need the Brown corpus and GPT-2's vocabulary.
scripts/get_data.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
echo "test.sh: finished in $(( $(date +%s) - start )) s"
