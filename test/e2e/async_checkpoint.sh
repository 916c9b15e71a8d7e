#!/usr/bin/env bash
# async_checkpoint.sh FIXTURES TRAINER [MPIEXEC]: checkpoint.async through the binary.
#  1. A run with background saves writes, step for step, the shard bytes of a
#     run saving in the foreground, and logs each completion (on 4 ranks,
#     dp2 x tp2, when MPIEXEC is given).
#     trainer plan's snapshot size is the bytes the run holds on rank 0.
#  2. A disk that fills during a background save (the file-size limit): exit 1,
#     one line naming the checkpoint, the failed file and the last good
#     checkpoint; `latest` still names it and nothing half-written is left.
set -u
fx=$1 trainer=$2 mpiexec=${3:-}
dir=$(mktemp -d "${TMPDIR:-/tmp}/async_ckpt.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$fx" || exit 1
export OMP_NUM_THREADS=1
fail=0
launch=() mesh=()
if [ -n "$mpiexec" ]; then
  launch=("$mpiexec" --allow-run-as-root --oversubscribe -np 4)
  mesh=(--set parallel.tp=2)
fi
job=(train mesh_gpt2.yaml --set train.steps=8 --set checkpoint.every=2 --set checkpoint.keep=10
     "${mesh[@]}")
"${launch[@]}" "$trainer" "${job[@]}" --set run.dir="$dir/fg" >"$dir/fg.log" 2>&1 ||
  { echo "FAIL: the foreground run failed"; cat "$dir/fg.log"; exit 1; }
"${launch[@]}" "$trainer" "${job[@]}" --set run.dir="$dir/bg" --set checkpoint.async=true \
  >"$dir/bg.log" 2>&1 || { echo "FAIL: the background run failed"; cat "$dir/bg.log"; exit 1; }
for step in 2 4 6; do
  grep -q "saving checkpoint step_00000$step in the background" "$dir/bg.log" ||
    { echo "FAIL: step $step was not saved in the background"; fail=1; }
  grep -q "saved checkpoint $dir/bg/checkpoints/step_00000$step (written in the background" "$dir/bg.log" ||
    { echo "FAIL: the completion of step $step is not logged"; fail=1; }
done
# trainer plan sizes rank 0's host snapshot exactly (the same list of tensors).
world=1
[ -n "$mpiexec" ] && world=4
planned=$("$trainer" plan mesh_gpt2.yaml --world $world "${mesh[@]}" --set checkpoint.async=true |
          sed -n 's/.*checkpoint.async snapshot \([0-9]*\) bytes.*/\1/p')
held=$(sed -n 's/.*host snapshot [^,]*, \([0-9]*\) bytes, on rank 0.*/\1/p' "$dir/bg.log" | sort -u)
[ -n "$planned" ] && [ "$planned" = "$held" ] ||
  { echo "FAIL: trainer plan says $planned bytes, the run held '$held'"; fail=1; }
# The run's last save is written in the foreground.
grep -q "^saved checkpoint $dir/bg/checkpoints/step_000008\$" "$dir/bg.log" ||
  { echo "FAIL: the last save was not in the foreground"; fail=1; }
shards=0
for f in "$dir"/fg/checkpoints/step_*/rank_*.safetensors; do
  rel=${f#"$dir"/fg/}
  cmp -s "$f" "$dir/bg/$rel" || { echo "FAIL: $rel differs"; fail=1; }
  shards=$((shards + 1))
done
want=4
[ -n "$mpiexec" ] && want=8  # tp 2: two shards a step (dp 2 x zero 1 adds optimizer halves)
[ "$shards" -ge "$want" ] || { echo "FAIL: only $shards shards compared"; fail=1; }
[ "$(cat "$dir/bg/checkpoints/latest")" = step_000008 ] || { echo "FAIL: latest is not step_000008"; fail=1; }

# 2: a disk that fills (files may not grow past 128 KiB, less than a shard;
# SIGXFSZ ignored so the write fails instead of killing the process). The run
# resumes from step 8 and its first background save, step 10, cannot be written.
if [ -z "$mpiexec" ]; then
  ( trap '' XFSZ; ulimit -f 256
    exec "$trainer" train mesh_gpt2.yaml --set train.steps=14 --set checkpoint.every=2 \
      --set checkpoint.keep=10 --set checkpoint.async=true --set run.dir="$dir/bg" ) \
    >"$dir/full.out" 2>"$dir/full.err"
  code=$?
  [ "$code" = 1 ] || { echo "FAIL: exit code $code on a full disk, expected 1"; fail=1; }
  [ "$(wc -l <"$dir/full.err")" = 1 ] || { echo "FAIL: stderr is not one line"; cat "$dir/full.err"; fail=1; }
  grep -q "checkpoint step_000010: .*rank_00000.safetensors: write failed (File too large); the last good one is $dir/bg/checkpoints/step_000008" \
    "$dir/full.err" || { echo "FAIL: the line does not name the checkpoint, file and last good one"; fail=1; }
  [ "$(cat "$dir/bg/checkpoints/latest")" = step_000008 ] || { echo "FAIL: latest moved"; fail=1; }
  ls "$dir/bg/checkpoints" | grep -q "step_000010" && { echo "FAIL: step_000010 left behind"; fail=1; }
  cat "$dir/full.err"
fi
[ $fail = 0 ] && echo "background saves equal foreground ones ($shards shards)${mpiexec:+ on 4 ranks}; snapshot $held bytes as planned"
exit $fail
