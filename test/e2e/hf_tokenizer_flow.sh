#!/usr/bin/env bash
# hf_tokenizer_flow.sh FIXTURES TRAINER TOKENIZER_JSON [BOS EOS [VOCAB_SIZE UNK]]:
# a tokenizer.json path with no Python (Llama 3's, or Llama 2's
# SentencePiece-style one): `trainer tokenize --tokenizer` a text into a
# Megatron dataset (each document BOS ... EOS, default Llama 3's 300 ... 301),
# train a llama job on it (model.vocab_size VOCAB_SIZE where given), `trainer
# sample --tokenizer` continues a prompt, and `trainer export --tokenizer`
# ships the tokenizer.json for PreTrainedTokenizerFast (with UNK as its
# unk_token where given).
set -euo pipefail
fx=$1 trainer=$2 tokjson=$3 bos=${4:-300} eos=${5:-301} vocab=${6:-} unk=${7:-}
cd "$fx"
export OMP_NUM_THREADS=1
work=runs/hf_tokenizer_flow_$(basename "$tokjson" .json)
rm -rf "$work" && mkdir -p "$work"
for i in 1 2 3 4; do printf 'hello world, the world said hello %d times.\naaaa ab aba\n' "$i" >"$work/doc$i.txt"; done
"$trainer" tokenize "$work"/doc*.txt --tokenizer "$tokjson" --format megatron --out "$work/data" --quiet >/dev/null
# Megatron's index: 4 documents, each starting with BOS and ending with EOS.
ids=$(od -An -v -t u2 "$work/data.bin" | tr -s ' \n' ' ')
read -ra list <<<"$ids"
[[ $(grep -o " $bos " <<<" $ids " | wc -l) -eq 4 && $(grep -o " $eos " <<<" $ids " | wc -l) -eq 4 &&
   ${list[0]} == "$bos" && ${list[-1]} == "$eos" ]] ||
  { echo "FAILED: expected 4 documents framed by $bos ... $eos, got:$ids"; exit 1; }
"$trainer" train mesh_llama.yaml --set run.dir="$work/run" --set train.steps=3 \
  --set data.train="$work/data" ${vocab:+--set model.vocab_size=$vocab} >/dev/null
out=$("$trainer" sample "$work/run" --tokenizer "$tokjson" --prompt "hello world" --tokens 4 --temperature 0)
[[ $out == "hello world"* ]] || { echo "FAILED: sample printed '$out'"; exit 1; }
"$trainer" export "$work/run" --format hf --out "$work/hf" --tokenizer "$tokjson" >/dev/null
cmp -s "$tokjson" "$work/hf/tokenizer.json" || { echo "FAILED: tokenizer.json not exported as it is"; exit 1; }
grep -q '"PreTrainedTokenizerFast"' "$work/hf/tokenizer_config.json" || { echo "FAILED: tokenizer_config.json"; exit 1; }
grep -Eq "\"bos_token_id\": $bos([^0-9]|$)" "$work/hf/config.json" || { echo "FAILED: config.json bos"; exit 1; }
grep -Eq "\"eos_token_id\": $eos([^0-9]|$)" "$work/hf/config.json" || { echo "FAILED: config.json eos"; exit 1; }
[[ -z $unk ]] || grep -q "\"unk_token\": \"$unk\"" "$work/hf/special_tokens_map.json" ||
  { echo "FAILED: special_tokens_map.json has no unk_token $unk"; exit 1; }
rm -rf "$work"
echo "hf tokenizer flow: tokenize, train, sample ('$out'), export"
