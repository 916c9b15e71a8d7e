#!/usr/bin/env bash
# pp_reshard_matches.sh FIXTURES TRAINER MPIEXEC: a checkpoint saved by a pp 4
# run of the tied-embedding GPT-2 (the last stage's copy of the token table is
# not saved) resumes on other layouts (pp 2, dp 2 x pp 2 with ZeRO-1, one
# rank) and training continues with the saving run's losses within 1e-5 relative.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3
cd "$fx"
export OMP_NUM_THREADS=1
job=(mesh_gpt2_l4.yaml --set train.steps=20 --set checkpoint.every=10)
src=runs/ppreshard_src
rm -rf runs/ppreshard_*
"$mpiexec" --allow-run-as-root --oversubscribe -np 4 "$trainer" train "${job[@]}" \
  --set run.dir=$src --set parallel.pp=4 >/dev/null
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
status=0
for layout in "2 --set parallel.pp=2" "4 --set parallel.pp=2 --set parallel.zero=1" "1"; do
  read -r np extra <<<"$layout"
  dst=runs/ppreshard_np${np}_$(echo "$extra" | tr -c 'a-z0-9' '_')
  # shellcheck disable=SC2086
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "${job[@]}" \
    --set run.dir="$dst" --set checkpoint.resume="$src/checkpoints/step_000010" $extra >/dev/null
  awk -v name="np $np $extra" 'NR == FNR { ref[$1] = $2; next }
    ($1 in ref) { n++; d = ref[$1] - $2; if (d < 0) d = -d; r = d / ref[$1]; if (r > w) w = r; if (r > 1e-5) bad++ }
    END { printf "%s: steps 11-20 compared %d, worst relative difference %.3g\n", name, n, w;
          exit !(n == 10 && bad == 0) }' <(losses $src) <(losses "$dst") || status=1
done
exit $status
