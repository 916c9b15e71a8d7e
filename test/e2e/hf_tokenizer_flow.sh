#!/usr/bin/env bash
# hf_tokenizer_flow.sh FIXTURES TRAINER TOKENIZER_JSON: the Llama 3 path with
# no Python: `trainer tokenize --tokenizer` a text into a Megatron dataset
# (each document <|begin_of_text|> ... <|end_of_text|>), train a llama job on
# it, `trainer sample --tokenizer` continues a prompt, and `trainer export
# --tokenizer` ships the tokenizer.json for PreTrainedTokenizerFast.
set -euo pipefail
fx=$1 trainer=$2 tokjson=$3
cd "$fx"
export OMP_NUM_THREADS=1
work=runs/hf_tokenizer_flow
rm -rf "$work" && mkdir -p "$work"
for i in 1 2 3 4; do printf 'hello world, the world said hello %d times.\naaaa ab aba\n' "$i" >"$work/doc$i.txt"; done
"$trainer" tokenize "$work"/doc*.txt --tokenizer "$tokjson" --format megatron --out "$work/data" --quiet >/dev/null
# Megatron's index: 4 documents, each starting with 300 and ending with 301.
ids=$(od -An -v -t u2 "$work/data.bin" | tr -s ' \n' ' ')
[[ $(grep -o ' 300 ' <<<" $ids " | wc -l) -eq 4 && $(grep -o ' 301 ' <<<" $ids " | wc -l) -eq 4 ]] ||
  { echo "FAILED: expected 4 documents framed by 300 ... 301, got:$ids"; exit 1; }
"$trainer" train mesh_llama.yaml --set run.dir="$work/run" --set train.steps=3 \
  --set data.train="$work/data" >/dev/null
out=$("$trainer" sample "$work/run" --tokenizer "$tokjson" --prompt "hello world" --tokens 4 --temperature 0)
[[ $out == "hello world"* ]] || { echo "FAILED: sample printed '$out'"; exit 1; }
"$trainer" export "$work/run" --format hf --out "$work/hf" --tokenizer "$tokjson" >/dev/null
cmp -s "$tokjson" "$work/hf/tokenizer.json" || { echo "FAILED: tokenizer.json not exported as it is"; exit 1; }
grep -q '"PreTrainedTokenizerFast"' "$work/hf/tokenizer_config.json" || { echo "FAILED: tokenizer_config.json"; exit 1; }
grep -q '"bos_token_id": 300' "$work/hf/config.json" || { echo "FAILED: config.json bos"; exit 1; }
rm -rf "$work"
echo "hf tokenizer flow: tokenize, train, sample ('$out'), export"
