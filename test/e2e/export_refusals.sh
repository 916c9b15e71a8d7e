#!/usr/bin/env bash
# export_refusals.sh FIXTURES TRAINER: a checkpoint of a model no transformers
# class computes (GPT-2 with MoE; llama MoE with shared experts in every other
# layer) is refused by `trainer export --format hf` with exit 2 and one line
# naming the job key, and nothing is written; a Mixtral-shaped llama MoE
# exports as MixtralForCausalLM.
set -uo pipefail
fx=$1 trainer=$2
cd "$fx" || exit 1
export OMP_NUM_THREADS=1
work=runs/export_refusals
rm -rf "$work"
refused() {  # job pattern [--set ...]
  local job=$1 pattern=$2
  shift 2
  "$trainer" train "$job" --set run.dir="$work/run_$job" --set train.steps=1 "$@" >/dev/null || exit 1
  "$trainer" export "$work/run_$job" --format hf --out "$work/hf_$job" >/dev/null 2>"$work/err"
  local rc=$?
  if [[ $rc -ne 2 ]] || ! grep -q "$pattern" "$work/err" || [[ $(wc -l <"$work/err") -ne 1 ]]; then
    echo "FAILED: export of $job -> exit $rc, stderr:"; cat "$work/err"; exit 1
  fi
  [[ ! -e "$work/hf_$job" ]] || { echo "FAILED: $work/hf_$job was written"; exit 1; }
  echo "refused: $(cat "$work/err")"
}
refused mesh_moe.yaml "model.moe: GPT-2 blocks with MoE layers are no Hugging Face architecture"
refused mesh_moe_llama.yaml "model.moe.every is 2: MixtralForCausalLM has an MoE in every layer"
refused mesh_moe_llama_l4.yaml "model.moe.n_shared_experts is 1: MixtralForCausalLM has no shared experts" \
  --set model.moe.every=1
"$trainer" train mesh_moe_llama.yaml --set run.dir="$work/mixtral" --set train.steps=1 \
  --set model.moe.every=1 --set model.moe.n_shared_experts=0 --set model.moe.balance=aux_loss >/dev/null || exit 1
"$trainer" export "$work/mixtral" --format hf --out "$work/hf_mixtral" | grep -q "as MixtralForCausalLM model" ||
  { echo "FAILED: the Mixtral-shaped job did not export as MixtralForCausalLM"; exit 1; }
grep -q '"model_type": "mixtral"' "$work/hf_mixtral/config.json" || { echo "FAILED: config.json"; exit 1; }
# The tokenizer's files: both or neither, and they must exist.
bad_tokenizer() {  # pattern args...
  local pattern=$1
  shift
  "$trainer" export "$work/mixtral" --format hf --out "$work/hf_tok" "$@" >/dev/null 2>"$work/err"
  local rc=$?
  if [[ $rc -ne 2 ]] || ! grep -q -e "$pattern" "$work/err" || [[ $(wc -l <"$work/err") -ne 1 ]] ||
     [[ -e "$work/hf_tok" ]]; then
    echo "FAILED: export $* -> exit $rc, stderr:"; cat "$work/err"; exit 1
  fi
  echo "refused: $(cat "$work/err")"
}
bad_tokenizer "give both" --vocab "$work/none.json"
bad_tokenizer "vocab $work/none.json: no such file" --vocab "$work/none.json" --merges "$work/none.txt"
rm -rf "$work"
echo "export refusals: 5 refused, the Mixtral-shaped job exported"
