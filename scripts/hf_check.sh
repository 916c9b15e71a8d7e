#!/usr/bin/env bash
# hf_check.sh [TRAINER] [OUT]: trains the tiny GPT-2 and Llama jobs a few steps
# on the CPU (data/brown), exports each with `trainer export --format hf
# --reference-logits 64`, and checks with scripts/hf_check.py that Hugging
# Face transformers loads the export as it is and computes the trainer's
# logits (and vLLM, where installed). Needs Python with torch + transformers.
# Exit: 0 every installed engine matches, 1 a mismatch or failure, 3
# transformers is not installed (nothing was checked).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
TRAINER=${1:-build/trainer}
OUT=${2:-$(mktemp -d "${TMPDIR:-/tmp}/hf_check.XXXXXX")}
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch, transformers' 2>/dev/null; then
  echo "hf_check: $PY cannot import torch and transformers"
  exit 3
fi
status=0
for job in tiny-gpt2 tiny-llama; do
  run=$OUT/$job/run hf=$OUT/$job/hf
  rm -rf "$OUT/$job"
  if ! OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} "$TRAINER" train "configs/$job.yaml" --set run.device=cpu \
      --set train.steps=5 --set train.eval_every=0 --set run.dir="$run" >"$OUT/$job.train.log" 2>&1; then
    echo "hf_check: $job: training failed:"; tail -3 "$OUT/$job.train.log"; status=1; continue
  fi
  if ! "$TRAINER" export "$run" --format hf --out "$hf" --reference-logits 64 >"$OUT/$job.export.log" 2>&1; then
    echo "hf_check: $job: export failed:"; tail -3 "$OUT/$job.export.log"; status=1; continue
  fi
  echo "hf_check: $job"
  "$PY" scripts/hf_check.py "$hf" --engine transformers || status=1
  "$PY" scripts/hf_check.py "$hf" --engine vllm
  rc=$?
  (( rc == 1 )) && status=1
done
exit $status
