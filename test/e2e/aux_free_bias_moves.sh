#!/usr/bin/env bash
# aux_free_bias_moves.sh FIXTURES TRAINER MPIEXEC JOB: the mesh tests compare
# aux-loss-free balancing on a mesh with one rank, which holds even if the
# bias never moved. Here, on 2 dp ranks (the loads the bias follows are summed
# over dp), model.moe.bias_update_rate 0.05 against 0: step 1 routes before any
# update, so its loss is the same; by step 3 the moved biases have changed some
# tokens' experts, and with them the loss.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 job=$4
cd "$fx"
mkdir -p runs
losses() {  # losses RATE: "step loss" per step
  local dir=runs/aux_free_bias_$1
  rm -rf "$dir"
  OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$trainer" train "$job" \
    --set run.dir="$dir" --set train.steps=3 --set train.eval_every=0 \
    --set model.moe.bias_update_rate="$1" >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  grep '"loss"' "$dir/metrics.jsonl" | sed 's/.*"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/'
}
moved=$(losses 0.05)
still=$(losses 0)
echo "bias_update_rate 0.05:"; echo "$moved"
echo "bias_update_rate 0:"; echo "$still"
first_moved=$(head -1 <<<"$moved") first_still=$(head -1 <<<"$still")
last_moved=$(tail -1 <<<"$moved") last_still=$(tail -1 <<<"$still")
[[ $first_moved == "$first_still" ]] || { echo "step 1 differs: the bias moved before any update"; exit 1; }
[[ $last_moved != "$last_still" ]] || { echo "step 3 is the same: the aux_free bias never moved"; exit 1; }
echo "the aux_free bias moved the routing after step 1"
