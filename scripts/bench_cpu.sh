#!/usr/bin/env bash
# CPU benchmark table for README: the GPT-2 benchmark shape (4 layers,
# d_model 256, seq 256, vocab 50257) on one rank with 1 and 2 threads, and on
# two data-parallel ranks with one thread each (global batch 8, micro-batch 4).
# Usage: scripts/bench_cpu.sh [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-5}
job=configs/gpt2-small-bench.yaml
run() { echo "\$ $*"; "$@" | sed 's/^/    /'; }
run env OMP_NUM_THREADS=1 build/trainer bench $job --steps "$steps"
run env OMP_NUM_THREADS=2 build/trainer bench $job --steps "$steps"
run env OMP_NUM_THREADS=2 build/trainer bench $job --steps "$steps" --set train.global_batch=8
run env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 \
  build/trainer bench $job --steps "$steps" --set train.global_batch=8
# ZeRO-3 and context parallelism on the same two ranks (cp: each rank holds
# half of every sequence, so a step is half the tokens of dp 2's).
run env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 \
  build/trainer bench $job --steps "$steps" --set train.global_batch=8 --set parallel.zero=3
run env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 \
  build/trainer bench $job --steps "$steps" --set train.global_batch=4 --set parallel.cp=2
