#!/usr/bin/env bash
# inspect_checkpoint.sh FIXTURES TRAINER MPIEXEC: `trainer inspect` on a dp2 x
# tp2 run's checkpoints: a run directory lists each step directory, verified,
# and summarises the one `auto` resumes (step, samples, mesh, model, parameter
# count); a damaged newest one is named and passed over; a damaged step
# directory, a run with none intact and a missing path are one line, exit 2.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3
cd "$fx"
dir=runs/inspect
rm -rf "$dir" "$dir-qwen3" "$dir-yarn"
OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np 4 "$trainer" train mesh_llama.yaml \
  --set run.dir="$dir" --set parallel.tp=2 --set train.steps=10 --set checkpoint.every=5 >/dev/null
status=0
expect() {  # expect WHAT TEXT: TEXT is among the output
  grep -qF -- "$2" <<<"$out" || { echo "FAIL $1: no '$2' in:"; echo "$out"; status=1; }
}
out=$("$trainer" inspect "$dir")
expect intact "$dir/checkpoints/step_000010: intact"
expect intact "$dir/checkpoints/step_000005: intact"
expect auto "checkpoint.resume: auto resumes $dir/checkpoints/step_000010"
expect summary "step 10, 80 training samples consumed (global batch 8, seq_len 16), seed 7"
expect mesh "saved on world 4: tp 2 x cp 1 x dp 2 x pp 1 (ep 1), zero 1"
# 2 layers of llama width 32 (GQA 4/2 heads, d_ff 64) over a vocabulary of 1000 padded to 1024.
expect model "model: llama, 2 layers, d_model 32, 4 heads (2 kv), d_ff 64, vocab 1000; 84128 parameters in 21 tensors"
shard=$dir/checkpoints/step_000010/rank_00001.safetensors
printf '\x7f' | dd of="$shard" bs=1 seek=$(($(stat -c %s "$shard") - 3)) conv=notrunc status=none
out=$("$trainer" inspect "$dir")
expect damaged "$dir/checkpoints/step_000010: DAMAGED: $shard: checksum mismatch"
expect fallback "checkpoint.resume: auto resumes $dir/checkpoints/step_000005"
refused() {  # refused NAME TEXT ARGS...: exit 2, one line on stderr with TEXT
  local name=$1 text=$2 err code
  shift 2
  err=$(mktemp)
  set +e
  "$trainer" inspect "$@" >/dev/null 2>"$err"
  code=$?
  set -e
  [ "$code" = 2 ] && [ "$(wc -l <"$err")" = 1 ] && grep -qF -- "$text" "$err" ||
    { echo "FAIL $name: exit $code: $(cat "$err")"; status=1; }
  rm -f "$err"
}
refused damaged_step "$shard: checksum mismatch" "$dir/checkpoints/step_000010"
shard5=$dir/checkpoints/step_000005/rank_00000.safetensors
printf '\x7f' | dd of="$shard5" bs=1 seek=$(($(stat -c %s "$shard5") - 3)) conv=notrunc status=none
refused none_intact "$dir: none of its 2 checkpoints is intact" "$dir"
refused missing "runs/no_such_run: no such checkpoint" runs/no_such_run
# Qwen3's attention options are named: heads of 16 over a width of 32, q/k norms.
OMP_NUM_THREADS=1 "$trainer" train mesh_qwen3.yaml --set run.dir="$dir-qwen3" --set train.steps=1 \
  --set checkpoint.every=1 >/dev/null
out=$("$trainer" inspect "$dir-qwen3")
expect qwen3 "model: llama, 2 layers, d_model 32, 4 heads (1 kv) of 16, q/k norms, d_ff 64, vocab 1000;"
# And a RoPE scaling: YaRN's factor and the context it scales.
OMP_NUM_THREADS=1 "$trainer" train mesh_llama_yarn.yaml --set run.dir="$dir-yarn" --set train.steps=1 \
  --set checkpoint.every=1 >/dev/null
out=$("$trainer" inspect "$dir-yarn")
expect yarn "model: llama, 2 layers, d_model 32, 4 heads (2 kv), yarn RoPE x4 over 8 positions, d_ff 64,"
[ "$status" = 0 ] && echo "inspect: listings, summary and refusals as expected"
exit $status
