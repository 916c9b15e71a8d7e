#!/usr/bin/env bash
# export_from_any_layout.sh FIXTURES TRAINER MPIEXEC JOB "LAYOUT"...: trains JOB
# on one rank and on each LAYOUT ("NP [--set ...]"), exports every final
# checkpoint as a Hugging Face model and starts a one-rank run from each
# export (model.init_from): the losses must equal the one-rank export's within
# 1e-5 relative (the checkpoints hold the same weights to float tolerance),
# and `trainer sample` must continue a prompt alike from every checkpoint.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 job=$4
shift 4
cd "$fx"
export OMP_NUM_THREADS=1
tag=$(echo "$job" | tr -c 'a-zA-Z0-9' '_')
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
greedy=(--prompt-ids 11,205,7 --tokens 8 --temperature 0 --ids)
one=runs/export_one_$tag
rm -rf "$one" "$one"_hf "$one"_init
"$trainer" train "$job" --set run.dir="$one" >/dev/null
"$trainer" export "$one" --out "$one"_hf >/dev/null
"$trainer" train "$job" --set run.dir="$one"_init --set model.init_from="$one"_hf --set train.steps=3 >/dev/null
ids_one=$("$trainer" sample "$one" "${greedy[@]}" 2>/dev/null)
status=0
for layout in "$@"; do
  read -r np extra <<<"$layout"
  dst=runs/export_${tag}_$(echo "$layout" | tr -c 'a-zA-Z0-9' '_')
  rm -rf "$dst" "$dst"_hf "$dst"_init
  # shellcheck disable=SC2086
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "$job" \
    --set run.dir="$dst" $extra >/dev/null
  if ! "$trainer" export "$dst" --out "$dst"_hf >/dev/null; then
    echo "$layout: export failed"; status=1; continue
  fi
  "$trainer" train "$job" --set run.dir="$dst"_init --set model.init_from="$dst"_hf \
    --set train.steps=3 >/dev/null
  awk -v name="$layout" 'NR == FNR { ref[$1] = $2; next }
    ($1 in ref) { n++; d = ref[$1] - $2; if (d < 0) d = -d; r = d / ref[$1]; if (r > w) w = r; if (r > 1e-5) bad++ }
    END { printf "%s: export imported, %d steps compared, worst relative difference %.3g\n", name, n, w;
          exit !(n == 3 && bad == 0) }' <(losses "$one"_init) <(losses "$dst"_init) || status=1
  ids=$("$trainer" sample "$dst" "${greedy[@]}" 2>/dev/null) || { echo "$layout: sample failed"; status=1; continue; }
  [[ $ids == "$ids_one" ]] || { echo "$layout: sample $ids, one rank $ids_one"; status=1; }
done
exit $status
