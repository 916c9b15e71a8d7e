#!/usr/bin/env bash
# max_minutes.sh FIXTURES TRAINER MPIEXEC: train.max_minutes stops a run whose
# train.steps lie far beyond its time budget: on two ranks every rank stops
# after the same step, saves it, and exits 0 naming the budget; a second
# start resumes from that step and stops again within its own budget.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3
cd "$fx"
export OMP_NUM_THREADS=1
dir=runs/max_minutes
rm -rf "$dir"
run() {
  "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$trainer" train mesh_gpt2.yaml \
    --set run.dir="$dir" --set train.steps=1000000 --set train.max_minutes=0.005 2>&1
}
first=$(run)
stop=$(echo "$first" | sed -n 's/^stopped after step \([0-9]*\) on train.max_minutes (0.005; .* since start)$/\1/p')
[ -n "$stop" ] || { echo "FAIL: no stop on train.max_minutes"; echo "$first" | tail -5; exit 1; }
[ -d "$dir/checkpoints/step_$(printf %06d "$stop")" ] || { echo "FAIL: step $stop was not saved"; exit 1; }
[ "$(grep -c '"loss"' "$dir/metrics.jsonl")" = "$stop" ] || { echo "FAIL: metrics.jsonl is not $stop steps"; exit 1; }
second=$(run)
echo "$second" | grep -q "^resumed from $dir/checkpoints/step_$(printf %06d "$stop") after step $stop" ||
  { echo "FAIL: the second start did not resume from step $stop"; exit 1; }
again=$(echo "$second" | sed -n 's/^stopped after step \([0-9]*\) on train.max_minutes.*/\1/p')
[ -n "$again" ] && [ "$again" -gt "$stop" ] || { echo "FAIL: second start stopped at '${again}'"; exit 1; }
echo "first start stopped after step $stop, the second after step $again (budget 0.3 s each)"
