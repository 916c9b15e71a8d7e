#!/usr/bin/env bash
# nvtx_ranges.sh FIXTURES TRAINER PROBE_SO MPIEXEC: the NVTX ranges Nsight
# Systems would show are where they belong. Two CPU ranks (dp 2) train the
# fixture job for 2 steps with nvtx_probe.so injected; rank 0's recorded range
# names must include each step, every layer's forward and backward, the
# embedding and head, the gradient sync and the optimizer step (NCCL collectives name
# theirs too, on GPU ranks only).
set -euo pipefail
fx=$1 trainer=$2 probe=$3 mpiexec=$4
cd "$fx"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 \
  -x NVTX_INJECTION64_PATH="$probe" bash -c \
  'NVTX_PROBE_OUT='"$out"'/ranges.$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
  "$trainer" train good.yaml --set train.steps=2 --set train.eval_every=0 \
  --set train.global_batch=4 --set run.dir="$out/run" >/dev/null
status=0
for want in "embedding forward" "transformer.h.0 forward" "transformer.h.0.attention forward" \
  "transformer.h.0.mlp forward" "lm_head forward" "lm_head backward" \
  "transformer.h.0 backward" "transformer.h.0.attention backward" "transformer.h.0.mlp backward" \
  "embedding backward" "gradient sync" "optimizer step" "step 1" "step 2"; do
  n=$(grep -cx "$want" "$out/ranges.0" || true)
  if (( n == 0 )); then echo "FAIL: no '$want' range"; status=1; else echo "ok: '$want' x $n"; fi
done
exit $status
