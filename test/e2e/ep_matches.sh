#!/usr/bin/env bash
# ep_matches.sh FIXTURES TRAINER MPIEXEC NP JOB [--set ...]: as mesh_matches.sh
# (one rank against NP ranks, 20 steps, 1e-5 relative), comparing the
# gradient norm of every step as well as the loss: AdamW hides a wrongly
# scaled expert gradient from the loss, not from the norm (which also checks
# that each expert element is counted once over the ep group); and the MoE
# aux loss, load imbalance and drops the step line reports (global numbers);
# and the dropless ep receive peak, on the mesh alone.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 np=$4 job=$5
shift 5
cd "$fx"
tag=$(echo "$job-$np-$*" | tr -c 'a-zA-Z0-9' '_')
ref=runs/epref_$tag mesh=runs/epmesh_$tag
rm -rf "$ref" "$mesh"
# The one-rank run, shared by every entry comparing against it (ref_run.sh).
source "$(dirname "${BASH_SOURCE[0]}")/ref_run.sh"
ref_run "$trainer" "$ref" "$job"
OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" \
  "$trainer" train "$job" --set run.dir="$mesh" "$@" >/dev/null
pick() {
  grep '"loss"' "$1/metrics.jsonl" |
    sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*"moe_aux_loss": \([^,]*\), "moe_imbalance": \([^,]*\), "moe_dropped": \([^,}]*\).*/\1 \2 \3 \4 \5/'
}
paste <(pick "$ref") <(pick "$mesh") | awk '
  function rel(a, b,   d) { d = a - b; if (d < 0) d = -d; return d / (a < 0 ? -a : a) }
  function abs(a) { return a < 0 ? -a : a }
  { n++; r = rel($1, $6); g = rel($2, $7); if (r > worst) worst = r; if (g > gworst) gworst = g;
    if (r > 1e-5 || g > 1e-5) { bad++; print "step " n ": loss " $1 " vs " $6 ", grad norm " $2 " vs " $7 }
    if (NF != 10 || abs($3 - $8) > 1e-5 * abs($3) + 1e-9 || $4 != $9 || $5 != $10) {
      bad++; print "step " n ": moe aux/imbalance/dropped " $3 " " $4 " " $5 " vs " $8 " " $9 " " $10 } }
  END { printf "%d steps compared, worst relative difference: loss %.3g, grad norm %.3g\n", n, worst, gworst;
        exit !(n == 20 && bad == 0) }'
# Evaluations, when the job has them: the same validation losses.
val() { grep '"val_loss"' "$1/metrics.jsonl" | sed 's/.*"val_loss": \([^}]*\)}.*/\1/' || true; }
paste <(val "$ref") <(val "$mesh") | awk '
  { n++; d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * $1) { bad++; print "eval " n ": " $1 " vs " $2 } }
  END { if (n) printf "%d evaluations compared\n", n; exit bad > 0 }'
# The sequence-wise balance loss's own figure, when the job has one.
seq_aux() { grep -o '"moe_seq_aux_loss": [^,}]*' "$1/metrics.jsonl" | sed 's/.*: //' || true; }
paste <(seq_aux "$ref") <(seq_aux "$mesh") | awk '
  { n++; d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * $1 + 1e-9) { bad++; print "seq aux " n ": " $1 " vs " $2 } }
  END { if (n) printf "%d sequence-wise balance losses compared\n", n; exit bad > 0 }'
# Dropless expert parallelism reports each step's receive peak (the most rows
# a rank's experts got in one micro-batch, x the balanced load): at least 1
# (the rows sent average the balanced load), at most ep_recv_headroom (else
# refused); one rank and capacity jobs have none.
ep=$(sed -n 's/^  ep: \([0-9]*\)$/\1/p' "$mesh/job.yaml")
cap=$(sed -n 's/^    capacity_factor: //p' "$mesh/job.yaml")
headroom=$(sed -n 's/^    ep_recv_headroom: //p' "$mesh/job.yaml")
peaks() { grep -o '"moe_ep_recv_peak": [^,}]*' "$1/metrics.jsonl" | sed 's/.*: //' || true; }
[[ -z $(peaks "$ref") ]] || { echo "the one-rank run reports an ep receive peak"; exit 1; }
if [[ ${ep:-1} -gt 1 && $cap == null ]]; then
  peaks "$mesh" | awk -v h="$headroom" '
    { n++; if ($1 < 1 || $1 > h) { bad++; print "step " n ": ep receive peak " $1 " outside [1, " h "]" }
      if ($1 > worst) worst = $1 }
    END { printf "%d ep receive peaks, the largest %.3g of %g\n", n, worst, h; exit !(n == 20 && bad == 0) }'
else
  [[ -z $(peaks "$mesh") ]] || { echo "an ep receive peak without dropless ep (ep ${ep:-?}, capacity $cap)"; exit 1; }
fi
