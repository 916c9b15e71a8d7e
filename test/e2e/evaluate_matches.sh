#!/usr/bin/env bash
# evaluate_matches.sh FIXTURES TRAINER MPIEXEC: `trainer evaluate` of a run's
# last checkpoint gives the validation loss the run logged at that step, on
# one rank and on tp2, dp2 and pp2 meshes (any layout loads the checkpoint; a
# pipeline evaluates through its own schedule), and writes nothing into the
# run directory.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3
cd "$fx"
mkdir -p runs
dir=runs/evaluate_matches
rm -rf "$dir"
job=(mesh_gpt2.yaml --set data.split=90,10 --set train.eval_batches=3 --set train.steps=10
     --set run.dir="$dir")
OMP_NUM_THREADS=1 "$trainer" train "${job[@]}" --set train.eval_every=5 >"$dir.train.log" 2>&1 ||
  { cat "$dir.train.log"; exit 1; }
logged=$(grep '"step": 10, "val_loss"' "$dir/metrics.jsonl" | sed 's/.*"val_loss": \([^}]*\)}.*/\1/')
[[ -n $logged ]] || { echo "the run logged no val_loss at step 10"; exit 1; }
before=$(find "$dir" -type f -printf '%p %s %T@\n' | sort | md5sum)
status=0
check() {  # check TAG OUTPUT
  local got
  got=$(sed -n 's/^step 10: val loss \([0-9.]*\),.*/\1/p' <<<"$2")
  [[ -n $got ]] || { echo "$1: no 'step 10: val loss' line in: $2"; status=1; return; }
  if awk -v a="$logged" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * a) }'; then
    echo "$1: val loss $got (the run logged $logged)"
  else
    echo "$1: val loss $got, but the run logged $logged"; status=1
  fi
}
check "one rank" "$(OMP_NUM_THREADS=1 "$trainer" evaluate "${job[@]}" 2>&1)"
check "tp 2" "$(OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$trainer" evaluate \
  "${job[@]}" --set parallel.tp=2 2>&1)"
check "dp 2" "$(OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$trainer" evaluate \
  "${job[@]}" 2>&1)"
check "pp 2" "$(OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$trainer" evaluate \
  "${job[@]}" --set parallel.pp=2 2>&1)"
after=$(find "$dir" -type f -printf '%p %s %T@\n' | sort | md5sum)
[[ $before == "$after" ]] || { echo "trainer evaluate changed files in $dir"; status=1; }
exit $status
