#!/usr/bin/env bash
# mesh_matches.sh FIXTURES TRAINER MPIEXEC NP JOB [--set ...]: trains JOB on
# one rank and on NP ranks (mpirun) with the given overrides (the mesh run's
# only: anything both runs need, a precision or a schedule, belongs in JOB) and requires the
# loss of every step to agree within 1e-5 relative (MESH_RTOL overrides: a
# bf16 mesh rounds partial sums the single rank never forms); MESH_GRAD_NORM=1
# compares every step's gradient norm as well (AdamW hides a wrongly scaled
# gradient from the loss, not from the norm); evaluations, when the job has
# them, must give the same validation losses. MESH_COMMON: overrides both runs
# take (the device); MESH_EXPECT: texts, separated by |, the mesh run's log
# must hold (what carries its collectives); MESH_PARAMS_NORM=1: see below.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 np=$4 job=$5
shift 5
cd "$fx"
tag=$(echo "$job-$np-$*" | tr -c 'a-zA-Z0-9' '_')
ref=runs/ref_$tag mesh=runs/mesh_$tag
rm -rf "$ref" "$mesh"
mkdir -p runs
read -r -a common <<<"${MESH_COMMON:-}"
# MESH_STEPS: fewer steps than the jobs' 20 (the emulated GPU is slow).
steps=20
if [[ -n ${MESH_STEPS:-} ]]; then steps=$MESH_STEPS; common+=(--set "train.steps=$steps"); fi
# MESH_PARAMS_NORM=1: both runs log the parameters' norm (log.params_norm),
# compared step by step as well.
if [[ -n ${MESH_PARAMS_NORM:-} ]]; then common+=(--set log.params_norm=true); fi
# The one-rank run, shared by every entry comparing against it (ref_run.sh).
source "$(dirname "${BASH_SOURCE[0]}")/ref_run.sh"
ref_run "$trainer" "$ref" "$job" "${common[@]}"
OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" \
  "$trainer" train "$job" --set run.dir="$mesh" "${common[@]}" "$@" >"$mesh.log" 2>&1 ||
  { cat "$mesh.log"; exit 1; }
IFS='|' read -r -a expects <<<"${MESH_EXPECT:-}"
for e in "${expects[@]}"; do
  grep -qF "$e" "$mesh.log" || { echo "the mesh run's log does not say '$e':"; head -3 "$mesh.log"; exit 1; }
done
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
paste <(losses "$ref") <(losses "$mesh") | awk -v tol="${MESH_RTOL:-1e-5}" -v norms="${MESH_GRAD_NORM:-0}" -v want="$steps" '
  function rel(a, b,   d) { d = a - b; if (d < 0) d = -d; return d / (a < 0 ? -a : a) }
  { n++; r = rel($1, $3); if (r > worst) worst = r; if (r > tol) { bad++; print "step " n ": " $1 " vs " $3 }
    if (norms) { g = rel($2, $4); if (g > gworst) gworst = g;
                 if (g > tol) { bad++; print "step " n ": grad norm " $2 " vs " $4 } } }
  END { printf "%d steps compared, worst relative difference %.3g", n, worst;
        if (norms) printf ", grad norm %.3g", gworst;
        printf "\n"; exit !(n == want && bad == 0) }'
val() { grep '"val_loss"' "$1/metrics.jsonl" | sed 's/.*"val_loss": \([^}]*\)}.*/\1/' || true; }
paste <(val "$ref") <(val "$mesh") | awk -v tol="${MESH_RTOL:-1e-5}" '
  { n++; d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > tol * $1) { bad++; print "eval " n ": " $1 " vs " $2 } }
  END { if (n) printf "%d evaluations compared\n", n; exit bad > 0 }'
if [[ -n ${MESH_PARAMS_NORM:-} ]]; then
  norms() { grep -o '"params_norm": [^,}]*' "$1/metrics.jsonl" | sed 's/.*: //'; }
  paste <(norms "$ref") <(norms "$mesh") | awk -v tol="${MESH_RTOL:-1e-5}" -v want="$steps" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = NF == 2 && $1 > 0 ? d / $1 : 1e9; if (r > worst) worst = r
      if (r > tol) { bad++; print "params norm " n ": " $1 " vs " $2 } }
    END { printf "%d parameter norms compared, worst relative difference %.3g\n", n, worst
          exit !(n == want && bad == 0) }'
fi
