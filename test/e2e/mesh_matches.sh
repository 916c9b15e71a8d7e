#!/usr/bin/env bash
# mesh_matches.sh FIXTURES TRAINER MPIEXEC NP JOB [--set ...]: trains JOB on
# one rank and on NP ranks (mpirun) with the given overrides and requires the
# loss of every step to agree within 1e-5 relative (MESH_RTOL overrides: a
# bf16 mesh rounds partial sums the single rank never forms).
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
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
paste <(losses "$ref") <(losses "$mesh") | awk -v tol="${MESH_RTOL:-1e-5}" '
  { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
    if (r > worst) worst = r; if (r > tol) { bad++; print "step " n ": " $1 " vs " $2 } }
  END { printf "%d steps compared, worst relative difference %.3g\n", n, worst;
        exit !(n == 20 && bad == 0) }'
