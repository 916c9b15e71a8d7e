#!/usr/bin/env bash
# straggler_timers.sh FIXTURES TRAINER MPIEXEC: log.timers names a straggler.
# Two data-parallel ranks, each pinned to its own core, where rank 1 shares
# its core with a busy loop: its forward-backward is the slowest and rank 0
# waits for it in the gradient sync, which the min/max ranks of metrics.jsonl
# and the log line must show on most steps. The same job without timers gives
# the same losses (the timers only read clocks). Skipped (77) on one core.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3
(($(nproc) >= 2)) && command -v taskset >/dev/null || { echo "skipped: needs 2 cores and taskset"; exit 77; }
cd "$fx"
export OMP_NUM_THREADS=1
steps=8
# Big enough that a step's compute (tens of ms) dwarfs the clocks' noise.
job=(mesh_gpt2.yaml --set model.d_model=128 --set model.d_ff=512 --set model.n_head=4
     --set model.max_seq_len=64 --set train.seq_len=64 --set train.global_batch=8
     --set train.steps=$steps --set parallel.dp=2)
hog_pid=
trap '[[ -n $hog_pid ]] && kill $hog_pid 2>/dev/null || true' EXIT
taskset -c 0 bash -c 'while :; do :; done' &
hog_pid=$!
run() {  # run DIR TIMERS: rank 0 on core 1, rank 1 on core 0 beside the busy loop
  rm -rf "$1"
  "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none \
    -np 1 taskset -c 1 "$trainer" train "${job[@]}" --set run.dir="$1" --set log.timers="$2" : \
    -np 1 taskset -c 0 "$trainer" train "${job[@]}" --set run.dir="$1" --set log.timers="$2" 2>&1
}
out=$(run runs/straggler true)
echo "$out" | grep -E "^ +timers ms, min / max over 2 ranks: data .* \| forward-backward .* \| grad-sync .* \| optimizer " | tail -2
[[ $(echo "$out" | grep -c "timers ms, min / max over 2 ranks") -ge $steps ]] || {
  echo "FAIL: no timers line per step"; echo "$out" | tail -5; exit 1; }
m=runs/straggler/metrics.jsonl
max_rank() {  # max_rank PHASE: one line per step
  grep '"loss"' "$m" | sed -n "s/.*\"$1\": {\"min\": [^,]*, \"min_rank\": [0-9]*, \"max\": [^,]*, \"max_rank\": \([0-9]*\)}.*/\1/p"
}
fb=$(max_rank forward-backward | tail -n +2)  # step 1 also warms up
gs=$(max_rank grad-sync | tail -n +2)
[[ $(echo "$fb" | wc -l) == $((steps - 1)) && $(echo "$gs" | wc -l) == $((steps - 1)) ]] || {
  echo "FAIL: metrics.jsonl lacks timers_ms"; tail -1 "$m"; exit 1; }
slow=$(echo "$fb" | grep -c '^1$' || true)
waits=$(echo "$gs" | grep -c '^0$' || true)
echo "steps 2-$steps: forward-backward slowest on rank 1 in $slow, grad sync longest on rank 0 in $waits"
((slow >= steps - 2 && waits >= steps - 2)) || { echo "FAIL: the straggler (rank 1) was not named"; exit 1; }
# Every phase's min <= max.
grep '"loss"' "$m" | grep -o '"min": [0-9.e+-]*, "min_rank": [0-9]*, "max": [0-9.e+-]*' |
  awk '{ if ($2 + 0 > $6 + 0) { print "FAIL: min above max: " $0; bad = 1 } } END { exit bad }'
run runs/straggler_off false >/dev/null
losses() { grep -o '"loss": [^,]*' "$1/metrics.jsonl"; }
[[ "$(losses runs/straggler)" == "$(losses runs/straggler_off)" ]] || { echo "FAIL: timers changed the losses"; exit 1; }
grep -q timers_ms runs/straggler_off/metrics.jsonl && { echo "FAIL: timers_ms without log.timers"; exit 1; }
echo "the same losses without timers"
