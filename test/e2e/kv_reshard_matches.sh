#!/usr/bin/env bash
# kv_reshard_matches.sh FIXTURES TRAINER MPIEXEC JOB "SRC_LAYOUT" "DST_LAYOUT"...:
# trains JOB for 20 steps on SRC_LAYOUT ("NP [--set ...]"), saving at step 10,
# resumes that checkpoint on each DST_LAYOUT and requires steps 11-20 to repeat
# the saving run's losses within 1e-5 relative. Used to move checkpoints into
# and out of layouts that replicate KV heads over tp ranks (n_kv_head < tp).
# RESHARD_EXACT=1 (a DST_LAYOUT the same as SRC_LAYOUT): the losses and
# gradient norms must repeat to the last digit, as one rank's resume does.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 job=$4 src_layout=$5
shift 5
cd "$fx"
export OMP_NUM_THREADS=1
run() {  # run NP DIR [--set ...]
  local np=$1 dir=$2
  shift 2
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "$job" \
    --set checkpoint.every=10 --set run.dir="$dir" "$@" >/dev/null
}
tag=$(echo "$job $src_layout" | tr -c 'a-zA-Z0-9' '_')
src=runs/kvsrc_$tag
rm -rf "$src" runs/kvdst_"$tag"_*
read -r np extra <<<"$src_layout"
# shellcheck disable=SC2086
run "$np" "$src" $extra
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2 \3/'; }
status=0
for layout in "$@"; do
  read -r np extra <<<"$layout"
  dst=runs/kvdst_${tag}_$(echo "$layout" | tr -c 'a-zA-Z0-9' '_')
  # shellcheck disable=SC2086
  run "$np" "$dst" --set checkpoint.resume="$src/checkpoints/step_000010" $extra
  awk -v name="$src_layout -> $layout" -v exact="${RESHARD_EXACT:-0}" 'NR == FNR { ref[$1] = $2; norm[$1] = $3; next }
    ($1 in ref) { n++; d = ref[$1] - $2; if (d < 0) d = -d; r = d / ref[$1]; if (r > w) w = r; if (r > 1e-5) bad++
                  if (exact && (ref[$1] != $2 || norm[$1] != $3)) { bad++; print "step " $1 ": " ref[$1] " " norm[$1] " vs " $2 " " $3 } }
    END { printf "%s: steps 11-20 compared %d, worst relative difference %.3g\n", name, n, w;
          exit !(n == 10 && bad == 0) }' <(losses "$src") <(losses "$dst") || status=1
done
exit $status
