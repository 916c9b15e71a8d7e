#!/usr/bin/env bash
# tensorboard_matches.sh FIXTURES TRAINER TFEVENTS_CHECK: log.metrics:
# tensorboard writes, beside metrics.jsonl, event files holding the same
# numbers (tfevents_check): a dense job with evaluations, 4 steps and then
# resumed to 6 (a second event file, metrics.jsonl appended); an MoE job in
# fp16, for the MoE and loss-scale tags.
set -euo pipefail
fx=$1 trainer=$2 check=$3
cd "$fx"
export OMP_NUM_THREADS=1
dense=runs/tensorboard_dense moe=runs/tensorboard_moe_fp16
rm -rf "$dense" "$moe"
job=(good.yaml --set run.dir="$dense" --set log.metrics=tensorboard --set data.val=data/random.bin
     --set train.eval_every=2)
"$trainer" train "${job[@]}" --set train.steps=4 >/dev/null
"$check" "$dense" 1
"$trainer" train "${job[@]}" --set train.steps=6 >"$dense.resume.log"
grep -q "resumed from" "$dense.resume.log" || { echo "FAIL: did not resume"; exit 1; }
"$check" "$dense" 2
"$trainer" train mesh_moe_eval.yaml --set run.dir="$moe" --set log.metrics=tensorboard \
  --set precision.compute=fp16 --set train.steps=4 --set train.eval_every=2 \
  --set model.moe.seq_aux_loss_coeff=0.01 >/dev/null
grep -q '"moe_aux_loss".*"moe_seq_aux_loss".*"loss_scale"' "$moe/metrics.jsonl" ||
  { echo "FAIL: no MoE, sequence-wise balance or fp16 fields"; exit 1; }
"$check" "$moe" 1
echo PASS
