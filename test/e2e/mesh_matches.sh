#!/usr/bin/env bash
# mesh_matches.sh FIXTURES TRAINER MPIEXEC NP JOB [--set ...]: trains JOB on
# one rank and on NP ranks (mpirun) with the given overrides and requires the
# loss of every step to agree within 1e-5 relative (MESH_RTOL overrides: a
# bf16 mesh rounds partial sums the single rank never forms). MESH_GRAD_NORM=1
# compares every step's gradient norm too (a norm summed wrongly over shards
# changes clipping, which the loss shows only slowly).
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 np=$4 job=$5
shift 5
cd "$fx"
tag=$(echo "$job-$np-$*" | tr -c 'a-zA-Z0-9' '_')
ref=runs/ref_$tag mesh=runs/mesh_$tag
rm -rf "$ref" "$mesh"
OMP_NUM_THREADS=1 "$trainer" train "$job" --set run.dir="$ref" >/dev/null
OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" \
  "$trainer" train "$job" --set run.dir="$mesh" "$@" >/dev/null
losses() {
  if [ "${MESH_GRAD_NORM:-0}" = 1 ]; then
    grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'
  else
    grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'
  fi
}
paste <(losses "$ref") <(losses "$mesh") | awk -v tol="${MESH_RTOL:-1e-5}" '
  function rel(a, b,   d) { d = a - b; if (d < 0) d = -d; return d / (a < 0 ? -a : a) }
  { n++; h = NF / 2; r = rel($1, $(h + 1));
    if (r > worst) worst = r; if (r > tol) { bad++; print "step " n ": " $1 " vs " $(h + 1) }
    if (h == 2) { g = rel($2, $4); if (g > gworst) gworst = g;
                  if (g > tol) { bad++; print "step " n ": grad norm " $2 " vs " $4 } } }
  END { printf "%d steps compared, worst relative difference %.3g%s\n", n, worst,
               h == 2 ? sprintf(", grad norm %.3g", gworst) : "";
        exit !(n == 20 && bad == 0) }'
