#!/usr/bin/env bash
# sample_matches.sh FIXTURES TRAINER MPIEXEC GPT2_DIR: `trainer sample` loads a
# checkpoint saved on any layout. The Llama fixture is trained on one rank and
# on tp 2 x pp 2 (4 ranks); greedy continuations of the same prompt from both
# checkpoints are the same ids (the weights agree to ~1e-8), seeded sampling
# repeats, and the text path decodes through GPT-2's vocabulary.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 GPT2_DIR=$4
if [[ ! -s $GPT2_DIR/encoder.json || ! -s $GPT2_DIR/vocab.bpe ]]; then
  echo "FAIL: $GPT2_DIR/encoder.json or vocab.bpe missing: run scripts/get_data.sh first"
  exit 1
fi
cd "$fx"
export OMP_NUM_THREADS=1
rm -rf runs/sample_one runs/sample_mesh
"$trainer" train mesh_llama.yaml --set run.dir=runs/sample_one >/dev/null
"$mpiexec" --allow-run-as-root --oversubscribe -np 4 "$trainer" train mesh_llama.yaml \
  --set run.dir=runs/sample_mesh --set parallel.tp=2 --set parallel.pp=2 >/dev/null
greedy=(--prompt-ids 11,205,7 --tokens 12 --temperature 0 --ids)
one=$("$trainer" sample runs/sample_one "${greedy[@]}" 2>/dev/null)
mesh=$("$trainer" sample runs/sample_mesh "${greedy[@]}" 2>/dev/null)
echo "one rank: $one"
echo "tp2 x pp2: $mesh"
[[ $(tr ',' '\n' <<<"$one" | wc -l) == 12 && $one == "$mesh" ]] || { echo "FAILED: greedy ids differ"; exit 1; }
seeded=(--prompt-ids 11,205,7 --tokens 12 --seed 5 --ids)
a=$("$trainer" sample runs/sample_one "${seeded[@]}" 2>/dev/null)
b=$("$trainer" sample runs/sample_one "${seeded[@]}" 2>/dev/null)
[[ $a == "$b" ]] || { echo "FAILED: the same seed gave $a then $b"; exit 1; }
text=$("$trainer" sample runs/sample_one --prompt "The" --tokens 5 --seed 5 \
  --vocab "$GPT2_DIR/encoder.json" --merges "$GPT2_DIR/vocab.bpe" 2>/dev/null)
[[ $text == The* ]] || { echo "FAILED: text sample '$text' does not start with the prompt"; exit 1; }
echo "seeded: $a; text: $text"
