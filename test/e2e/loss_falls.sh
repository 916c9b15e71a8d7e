#!/usr/bin/env bash
# loss_falls.sh TRAINER SOURCE_DIR RUN_DIR: trains configs/tiny-gpt2.yaml for
# 100 steps on the Brown corpus and requires the mean training loss of the
# last 10 steps to be at least MARGIN below the first step's loss (which is
# about ln(50257) = 10.8 at initialisation), and the final validation loss to
# be below 8.5 (measured: 10.84 -> 7.72, val 7.90).
set -euo pipefail
trainer=$1 src=$2 run=$3
MARGIN=2.5
cd "$src"
if ! ls data/brown/train_*.bin >/dev/null 2>&1; then
  echo "FAIL: data/brown/train_*.bin missing: run scripts/get_data.sh first"
  exit 1
fi
rm -rf "$run"
"$trainer" train configs/tiny-gpt2.yaml --set run.dir="$run" --set train.steps=100 \
  --set train.eval_every=100
m="$run/metrics.jsonl"
first=$(grep -m1 '"loss"' "$m" | sed 's/.*"loss": \([^,]*\),.*/\1/')
last=$(grep '"loss"' "$m" | tail -10 | sed 's/.*"loss": \([^,]*\),.*/\1/' | awk '{s+=$1} END {print s/NR}')
val=$(grep '"val_loss"' "$m" | tail -1 | sed 's/.*"val_loss": \([^}]*\)}.*/\1/')
echo "first loss $first, mean of last 10 $last, final val loss $val (margin $MARGIN)"
awk -v f="$first" -v l="$last" -v m="$MARGIN" -v v="$val" \
  'BEGIN { exit !(f - l >= m && v < 8.5) }' || { echo "FAIL: loss did not fall enough"; exit 1; }
echo PASS
