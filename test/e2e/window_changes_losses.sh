#!/usr/bin/env bash
# window_changes_losses.sh FIXTURES TRAINER JOB: the mesh tests compare a
# sliding window on a mesh with one rank, which holds even if the key never
# reached the model; here model.sliding_window 5 must change the first step's
# loss against none, and a window of the whole sequence (16) must not;
# model.full_attention_every 2 (the second layer in full) must change it again.
set -euo pipefail
fx=$1 trainer=$2 job=$3
cd "$fx"
mkdir -p runs
first_loss() {  # first_loss TAG [--set ...]
  local dir=runs/window_change_$1; shift
  rm -rf "$dir"
  OMP_NUM_THREADS=1 "$trainer" train "$job" --set run.dir="$dir" --set train.steps=1 "$@" \
    >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  grep '"loss"' "$dir/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'
}
none=$(first_loss none)
narrow=$(first_loss narrow --set model.sliding_window=5)
whole=$(first_loss whole --set model.sliding_window=16)
every2=$(first_loss every2 --set model.sliding_window=5 --set model.full_attention_every=2)
echo "first loss: no window $none, window 5 $narrow, window 16 $whole, window 5 with layer 2 full $every2"
[[ $narrow != "$none" ]] || { echo "model.sliding_window=5 changed nothing"; exit 1; }
[[ $every2 != "$narrow" && $every2 != "$none" ]] || { echo "model.full_attention_every=2 changed nothing"; exit 1; }
[[ $whole == "$none" ]] || { echo "a window of the whole sequence changed the loss"; exit 1; }
