#!/usr/bin/env bash
# hf_check.sh [TRAINER] [OUT]: trains the tiny GPT-2, Llama, Qwen2-shaped (tiny-llama
# with q/k/v biases and a tied head), Qwen3-shaped (tiny-llama with q/k norms and
# a tied head), Mixtral-shaped MoE (moe-tiny), Qwen3-MoE-shaped (moe-tiny with
# q/k norms, a dense layer 0 and top-k weights not renormalised) and Qwen2-MoE-shaped
# (moe-tiny with q/k/v biases, a dense layer 0 and a gated shared expert) jobs and tiny-llama
# with YaRN RoPE scaling a few steps
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
# With GPT-2's vocabulary at hand (scripts/get_data.sh fetches it) the exports
# carry the tokenizer, checked against `trainer tokenize` on a sample text.
GPT2=${GPT2_DIR:-data/gpt2}
tok_args=()
if [[ -f $GPT2/encoder.json && -f $GPT2/vocab.bpe ]]; then
  tok_args=(--vocab "$GPT2/encoder.json" --merges "$GPT2/vocab.bpe")
  mkdir -p "$OUT"
  printf 'The Fulton County Grand Jury said Friday an investigation of Atlanta\x27s recent\nprimary election produced "no evidence" that any irregularities took place . 1962: caf\xc3\xa9s\n' \
    >"$OUT/sample.txt"
  if ! "$TRAINER" tokenize "$OUT/sample.txt" "${tok_args[@]}" --out "$OUT/sample_" >"$OUT/tokenize.log" 2>&1; then
    echo "hf_check: trainer tokenize failed:"; tail -3 "$OUT/tokenize.log"; status=1; tok_args=()
  fi
fi
for job in tiny-gpt2 tiny-llama tiny-qwen2 tiny-qwen3 moe-tiny tiny-qwen3-moe tiny-qwen2-moe tiny-llama-yarn; do
  run=$OUT/$job/run hf=$OUT/$job/hf
  rm -rf "$OUT/$job"
  config=configs/$job.yaml shape=()
  case $job in
    tiny-qwen2) config=configs/tiny-llama.yaml shape=(--set model.qkv_bias=true --set model.tie_embeddings=true) ;;
    tiny-qwen3) config=configs/tiny-llama.yaml shape=(--set model.qk_norm=true --set model.tie_embeddings=true) ;;
    tiny-llama-yarn) config=configs/tiny-llama.yaml
      shape=(--set model.rope_scaling.type=yarn --set model.rope_scaling.factor=4
             --set model.rope_scaling.original_max_position_embeddings=32) ;;
    tiny-qwen3-moe) config=configs/moe-tiny.yaml
      shape=(--set model.qk_norm=true --set model.moe.every=2 --set model.moe.normalize_topk=false) ;;
    tiny-qwen2-moe) config=configs/moe-tiny.yaml
      shape=(--set model.qkv_bias=true --set model.moe.first_dense=1 --set model.moe.normalize_topk=false
             --set model.moe.n_shared_experts=2 --set model.moe.shared_expert_gate=true) ;;
  esac
  if ! OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} "$TRAINER" train "$config" "${shape[@]}" --set run.device=cpu \
      --set train.steps=5 --set train.eval_every=0 --set run.dir="$run" >"$OUT/$job.train.log" 2>&1; then
    echo "hf_check: $job: training failed:"; tail -3 "$OUT/$job.train.log"; status=1; continue
  fi
  if ! "$TRAINER" export "$run" --format hf --out "$hf" --reference-logits 64 "${tok_args[@]}" \
      >"$OUT/$job.export.log" 2>&1; then
    echo "hf_check: $job: export failed:"; tail -3 "$OUT/$job.export.log"; status=1; continue
  fi
  echo "hf_check: $job"
  "$PY" scripts/hf_check.py "$hf" --engine transformers || status=1
  if (( ${#tok_args[@]} )) && [[ $job == tiny-gpt2 ]]; then  # the same tokenizer files in every export
    "$PY" scripts/hf_check.py "$hf" --text "$OUT/sample.txt" --tokens "$OUT/sample__train_000000.bin" || status=1
  fi
  "$PY" scripts/hf_check.py "$hf" --engine vllm
  rc=$?
  (( rc == 1 )) && status=1
  if [[ $job == tiny-llama ]]; then  # bf16 in save_pretrained's shards + index
    if "$TRAINER" export "$run" --format hf --out "$hf-bf16" --dtype bf16 --max-shard-size 2MB \
        --reference-logits 64 >"$OUT/$job.export-bf16.log" 2>&1; then
      echo "hf_check: $job, bf16 shards"
      "$PY" scripts/hf_check.py "$hf-bf16" --engine transformers || status=1
    else
      echo "hf_check: $job: bf16 export failed:"; tail -3 "$OUT/$job.export-bf16.log"; status=1
    fi
  fi
done
exit $status
