#!/usr/bin/env bash
# rampup_batch.sh FIXTURES TRAINER TFEVENTS_CHECK: train.rampup_batch_size
# [2, 2, 40] up to global_batch 8.
#  - Each step's logged global batch is Megatron's, computed here by its
#    formula in awk (in double, as its Python divides), and the log names the ramp.
#  - The ramp's first steps (at batch 2) are, bit for bit, a run at global_batch 2.
#  - A run stopped mid-ramp resumes bit-exactly; its checkpoint records the
#    samples the ramp consumed (the sum of the logged batches).
#  - TensorBoard's batch-size is metrics.jsonl's global_batch.
#  - A ramp changed on resume is noted.
set -euo pipefail
fx=$1 trainer=$2 check=$3
cd "$fx"
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
# A constant schedule: the learning rate of a step does not depend on train.steps,
# so a run cut short and resumed is comparable step by step.
job=(mesh_gpt2.yaml --set optimizer.schedule=constant --set checkpoint.resume=auto)
ramp=(--set 'train.rampup_batch_size=[2,2,40]')
run=runs/ramp fixed=runs/ramp_fixed2 part=runs/ramp_resumed
rm -rf "$run" "$fixed" "$part"
mkdir -p runs
"$trainer" train "${job[@]}" "${ramp[@]}" --set train.steps=20 --set run.dir=$run \
  --set log.metrics=tensorboard >$run.log
grep -qF "batch ramp: global batch 2 rising by 2 over the first 40 samples to 8" $run.log ||
  fail "the log does not name the ramp"
grep -qF "| batch 4" $run.log || fail "the step lines do not show the batch"

want=$(awk 'BEGIN { start = 2; incr = 2; samples = 40; global = 8
  per_increment = samples / ((global - start) / incr); c = 0
  for (s = 1; s <= 20; s++) { g = c > samples ? global : start + int(c / per_increment) * incr
                              printf "%d ", g; c += g } }')
got=$(grep -o '"global_batch": [0-9]*' $run/metrics.jsonl | awk '{ printf "%d ", $2 }')
[ "$want" = "$got" ] || fail "batches $got; Megatron's are $want"
echo "batches: $got"

# Loss and gradient norm of each step.
numbers() { sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/' "$1/metrics.jsonl"; }
"$trainer" train "${job[@]}" --set train.global_batch=2 --set train.steps=7 --set run.dir=$fixed >/dev/null
small=$(echo "$got" | awk '{ for (i = 1; i <= NF && $i == 2; i++) n = i; print n }')
[ "$small" -ge 5 ] || fail "only $small steps at batch 2"
diff <(numbers $fixed | head -"$small") <(numbers $run | head -"$small") >/dev/null ||
  fail "the ramp's first $small steps differ from a run at global_batch 2"
[ "$(numbers $run | sed -n 8p)" != "$(numbers $fixed | sed -n 7p)" ] || fail "step 8 took batch 2 too"

# Stopped after step 9 (batch 4), resumed to 20.
"$trainer" train "${job[@]}" "${ramp[@]}" --set train.steps=9 --set run.dir=$part >/dev/null
consumed=$(grep -o '"samples_consumed": *[0-9]*' $part/checkpoints/step_000009/metadata.json | grep -o '[0-9]*$')
sum=$(echo "$got" | awk '{ for (i = 1; i <= 9; i++) s += $i; print s }')
[ "$consumed" = "$sum" ] || fail "the checkpoint after step 9 records $consumed samples, the steps took $sum"
"$trainer" train "${job[@]}" "${ramp[@]}" --set train.steps=20 --set run.dir=$part >$part.log
grep -q "resumed from" $part.log || fail "did not resume"
grep -qF "this run starts at 4" $part.log || fail "the resumed run does not start at batch 4"
diff <(numbers $run) <(numbers $part) || fail "the resumed run's losses differ from the uninterrupted run's"
diff <(grep -o '"global_batch": [0-9]*' $run/metrics.jsonl) <(grep -o '"global_batch": [0-9]*' $part/metrics.jsonl) ||
  fail "the resumed run's batches differ"

"$check" $run 1

# A ramp changed on resume: noted, and followed from the samples consumed.
"$trainer" train "${job[@]}" --set 'train.rampup_batch_size=[4,4,200]' --set train.steps=21 \
  --set run.dir=$part >$part.changed.log
grep -qF "note: train.rampup_batch_size was [2, 2, 40] in the checkpoint, [4, 4, 200] now" $part.changed.log ||
  fail "a changed ramp is not noted"
tail -1 $part/metrics.jsonl | grep -qF '"global_batch": 4' || fail "step 21 does not follow the new ramp"
echo PASS
