#!/usr/bin/env bash
# resume_matches.sh FIXTURES TRAINER MODE [KEY=VALUE...]: a run interrupted
# and resumed gives exactly the losses of the uninterrupted run (the extra
# settings, e.g. precision.compute=fp8, apply to every run).
#   kill: SIGKILL once 10 steps are logged (checkpoint every step), restart.
#   term: SIGTERM once 10 steps are logged: must save, say so, and exit 0; restart.
# RESUME_MPIEXEC and RESUME_NP set: every run on NP ranks through that mpirun
# (term only: mpirun forwards SIGTERM to every rank, each must write its
# slices; Open MPI's mpirun itself exits 1 once signalled, so its exit code
# is not checked).
set -euo pipefail
fx=$1 trainer=$2 mode=$3
shift 3
cd "$fx"
launch=()
if [ -n "${RESUME_NP:-}" ]; then
  [ "$mode" = term ] || { echo "RESUME_NP: only the term mode runs on several ranks"; exit 1; }
  launch=("$RESUME_MPIEXEC" --allow-run-as-root --oversubscribe -np "$RESUME_NP")
fi
job=(mesh_gpt2.yaml --set model.d_model=128 --set model.d_ff=512 --set train.steps=60
     --set checkpoint.every=1 --set checkpoint.keep=2)
tag=$mode${RESUME_NP:+_np$RESUME_NP}
for kv in "$@"; do job+=(--set "$kv"); tag+="_${kv##*=}"; done
ref=runs/resume_ref_$tag run=runs/resume_$tag
rm -rf "$ref" "$run"
export OMP_NUM_THREADS=1
"${launch[@]}" "$trainer" train "${job[@]}" --set run.dir="$ref" >/dev/null
"${launch[@]}" "$trainer" train "${job[@]}" --set run.dir="$run" >"$run.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  logged=$(grep -c '"loss"' "$run/metrics.jsonl" 2>/dev/null || true)  # none yet: "0" or ""
  [ "${logged:-0}" -ge 10 ] && break
  sleep 0.05
done
if [ "$mode" = kill ]; then
  kill -KILL $pid
  wait $pid || true
else
  kill -TERM $pid
  code=0
  wait $pid || code=$?
  [ $code = 0 ] || [ -n "${RESUME_NP:-}" ] || { echo "FAIL: exit code $code after SIGTERM"; cat "$run.log"; exit 1; }
  grep -q "stopped after step" "$run.log" || { echo "FAIL: no stop message"; exit 1; }
  grep -q "saved checkpoint" "$run.log" || { echo "FAIL: no checkpoint saved"; exit 1; }
fi
stopped=$(grep -c '"loss"' "$run/metrics.jsonl")
[ "$stopped" -lt 60 ] || { echo "FAIL: the run finished before it was interrupted"; exit 1; }
"${launch[@]}" "$trainer" train "${job[@]}" --set run.dir="$run" >"$run.resume.log" 2>&1
grep -q "resumed from" "$run.resume.log" || { echo "FAIL: did not resume"; exit 1; }
# The later line of a step counts (steps after the last checkpoint appear twice).
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/' |
           awk '{ l[$1] = $2 } END { for (s = 1; s <= 60; s++) print s, l[s] }'; }
if diff <(losses "$ref") <(losses "$run") >/dev/null; then
  echo "interrupted after $stopped logged steps; $(grep -o 'resumed from [^ ]*' "$run.resume.log"); all 60 losses identical"
else
  diff <(losses "$ref") <(losses "$run") | head; echo "FAIL: losses differ"; exit 1
fi
