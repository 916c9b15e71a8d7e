#!/usr/bin/env bash
# diverged_run.sh FIXTURES TRAINER: an fp32 run whose gradients overflow on
# the first step (init_std 1e30) stops with exit 1 and one line saying it
# diverged, instead of training on clipped-to-zero updates to exit 0; and
# metrics.jsonl stays JSON (the step's non-finite norm is null, never a bare inf).
set -u
fx=$1 trainer=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/diverged.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$fx" || exit 1
"$trainer" train good.yaml --set run.dir="$dir/run" --set model.init_std=1e30 \
  --set train.steps=3 >/dev/null 2>"$dir/err"
code=$?
fail=0
[ "$code" = 1 ] || { echo "FAIL: exit code $code, expected 1"; fail=1; }
grep -q "step 1: gradient norm is inf .*the run diverged" "$dir/err" ||
  { echo "FAIL: stderr lacks the divergence line"; fail=1; }
[ "$(wc -l <"$dir/err")" = 1 ] || { echo "FAIL: stderr is not one line"; fail=1; }
grep -q '"grad_norm": null' "$dir/run/metrics.jsonl" || { echo "FAIL: no null norm"; fail=1; }
if grep -qiE ': -?(inf|nan)' "$dir/run/metrics.jsonl"; then
  echo "FAIL: metrics.jsonl holds a bare inf/nan"; fail=1
fi
[ ! -e "$dir/run/checkpoints" ] || { echo "FAIL: a diverged step was saved"; fail=1; }
cat "$dir/err"
exit $fail
