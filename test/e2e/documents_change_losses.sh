#!/usr/bin/env bash
# documents_change_losses.sh FIXTURES TRAINER JOB: the mesh tests compare
# document masking on a mesh with one rank, which holds even if a flag never
# reached the model; here each of data.reset_attention_mask,
# reset_position_ids and eod_mask_loss alone must change the first step's loss
# against all three off (JOB has them on, over data with short documents).
set -euo pipefail
fx=$1 trainer=$2 job=$3
cd "$fx"
mkdir -p runs
flags=(reset_attention_mask reset_position_ids eod_mask_loss)
first_loss() {  # first_loss TAG [--set ...]
  local dir=runs/docs_change_${job%.yaml}_$1; shift
  rm -rf "$dir"
  OMP_NUM_THREADS=1 "$trainer" train "$job" --set run.dir="$dir" --set train.steps=1 \
    --set train.eval_every=0 "$@" >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  grep '"loss"' "$dir/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'
}
off=()
for f in "${flags[@]}"; do off+=(--set "data.$f=false"); done
base=$(first_loss off "${off[@]}")
bad=0
for f in "${flags[@]}"; do
  only=()
  for g in "${flags[@]}"; do [[ $g == "$f" ]] || only+=(--set "data.$g=false"); done
  loss=$(first_loss "$f" "${only[@]}")
  echo "$f alone: loss $loss (all off: $base)"
  [[ $loss != "$base" ]] || { echo "data.$f changed nothing"; bad=1; }
done
exit $bad
