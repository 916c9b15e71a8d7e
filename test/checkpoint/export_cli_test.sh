#!/usr/bin/env bash
# export_cli_test.sh TRAINER WORKDIR: `trainer export` refuses a missing
# checkpoint, an unknown format or dtype, fp8 block sizes without fp8, a bad shard size, a negative
# reference length and an
# output path that is a file with exit
# 2 and one line, writing nothing.
set -uo pipefail
trainer=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
check() {  # expected-code pattern args...
  local want=$1 pattern=$2
  shift 2
  "$trainer" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [[ $rc -ne $want ]] || ! grep -q -e "$pattern" "$work/err" || [[ $(wc -l <"$work/err") -ne 1 ]]; then
    echo "FAILED: trainer $* -> exit $rc, stderr:"; cat "$work/err"; exit 1
  fi
}
check 2 "^trainer: error: $work/none: no such checkpoint$" export "$work/none" --out "$work/hf"
mkdir -p "$work/empty"
check 2 "^trainer: error: $work/empty: no checkpoint found" export "$work/empty" --out "$work/hf"
check 2 "^trainer: error: --format: 'gguf' is not supported (expected hf)$" \
  export "$work/empty" --format gguf --out "$work/hf"
check 2 "^trainer: error: --reference-logits: expected a number of tokens (>= 1; 0 = none), got -3$" \
  export "$work/empty" --out "$work/hf" --reference-logits -3
check 2 "^trainer: error: --max-shard-size: 'lots' is not a size (expected e.g. 5GB, 500MB, 2GiB or bytes)$" \
  export "$work/empty" --out "$work/hf" --max-shard-size lots
check 2 "--dtype: fp64 not in" export "$work/empty" --out "$work/hf" --dtype fp64
check 2 "^trainer: error: --fp8-block: sizes the blocks of --dtype fp8, but --dtype is bf16$" \
  export "$work/empty" --out "$work/hf" --dtype bf16 --fp8-block 64 64
echo "a file" >"$work/afile"
check 2 "^trainer: error: --out: $work/afile: it exists and is not a directory$" \
  export "$work/empty" --out "$work/afile"
check 2 "^trainer: error: --out: $work/afile/hf: $work/afile exists and is not a directory$" \
  export "$work/empty" --out "$work/afile/hf"
[[ ! -e "$work/hf" ]] || { echo "FAILED: $work/hf was created"; exit 1; }
rm -rf "$work"
echo "export cli: 9 refusals ok"
