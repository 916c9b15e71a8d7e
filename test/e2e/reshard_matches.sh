#!/usr/bin/env bash
# reshard_matches.sh FIXTURES TRAINER MPIEXEC [SRC_NP "SRC_OVERRIDES"]: a
# checkpoint saved on 4 ranks by a dp2 x tp2 run (ZeRO-1, the default source)
# or the given layout resumes on other layouts (dp 4 with ZeRO-2, tp 2, one
# rank) and training continues with the saving run's losses within 1e-5 relative.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 src_np=${4:-4} src_args=${5:---set parallel.tp=2 --set parallel.zero=1}
cd "$fx"
export OMP_NUM_THREADS=1
job=(mesh_gpt2.yaml --set train.steps=30 --set checkpoint.every=10)
tag=$(echo "$src_np $src_args" | tr -c 'a-z0-9' '_')
src=runs/reshard_src_$tag
rm -rf runs/reshard_*_"$tag"*
# shellcheck disable=SC2086
"$mpiexec" --allow-run-as-root --oversubscribe -np "$src_np" "$trainer" train "${job[@]}" \
  --set run.dir="$src" $src_args >/dev/null
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
status=0
for layout in "4 --set parallel.zero=2" "2 --set parallel.tp=2" "1"; do
  read -r np extra <<<"$layout"
  dst=runs/reshard_${tag}_to_np${np}_$(echo "$extra" | tr -c 'a-z0-9' '_')
  # shellcheck disable=SC2086
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "${job[@]}" \
    --set run.dir="$dst" --set checkpoint.resume="$src/checkpoints/step_000020" $extra >/dev/null
  awk -v name="np $np $extra" 'NR == FNR { ref[$1] = $2; next }
    ($1 in ref) { n++; d = ref[$1] - $2; if (d < 0) d = -d; r = d / ref[$1]; if (r > w) w = r; if (r > 1e-5) bad++ }
    END { printf "%s: steps 21-30 compared %d, worst relative difference %.3g\n", name, n, w;
          exit !(n == 10 && bad == 0) }' <(losses "$src") <(losses "$dst") || status=1
done
exit $status
