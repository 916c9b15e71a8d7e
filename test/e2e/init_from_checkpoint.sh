#!/usr/bin/env bash
# init_from_checkpoint.sh FIXTURES TRAINER MPIEXEC JOB [--no-hf] "SOURCE" "LAYOUT"...:
# trains JOB on SOURCE ("NP [--set ...]") and starts new 3-step runs from its
# checkpoint (model.init_from naming the run directory) on each LAYOUT. Each
# must give the losses of a one-rank run started from the same weights
# through a Hugging Face export (with --no-hf, for a model no transformers
# class holds: of the first LAYOUT's run) within 1e-5 relative, start below a
# fresh run's first loss (the weights were loaded), and count steps and data
# from the start. Then the refusals: another model's checkpoint (d_ff
# changed) and a corrupt shard each give one line and exit 2, writing nothing;
# a changed rope_theta is accepted with a note.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 job=$4
shift 4
hf=1
[ "$1" = --no-hf ] && { hf=0; shift; }
source_layout=$1
shift
cd "$fx"
export OMP_NUM_THREADS=1
tag=init_$(echo "$job" | tr -c 'a-zA-Z0-9' '_')
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
run() {  # run NP DIR [--set ...]
  local np=$1 dir=$2
  shift 2
  rm -rf "$dir"
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "$job" \
    --set run.dir="$dir" "$@" >/dev/null
}
src=runs/${tag}_source
read -r np extra <<<"$source_layout"
# shellcheck disable=SC2086
run "$np" "$src" $extra
run 1 runs/${tag}_fresh --set train.steps=3
fresh=$(losses runs/${tag}_fresh | head -1 | cut -d' ' -f2)
ref=""
if ((hf)); then
  rm -rf "$src"_hf
  "$trainer" export "$src" --out "$src"_hf >/dev/null
  ref=runs/${tag}_hf_init
  run 1 "$ref" --set model.init_from="$src"_hf --set train.steps=3
fi
status=0
for layout in "$@"; do
  read -r np extra <<<"$layout"
  dst=runs/${tag}_$(echo "$layout" | tr -c 'a-zA-Z0-9' '_')
  # shellcheck disable=SC2086
  run "$np" "$dst" --set model.init_from="$src" --set train.steps=3 $extra
  [ -n "$ref" ] || ref=$dst
  awk -v name="init_from on $layout" -v fresh="$fresh" 'NR == FNR { ref[$1] = $2; next }
    ($1 in ref) { n++; d = ref[$1] - $2; if (d < 0) d = -d; r = d / ref[$1]; if (r > w) w = r; if (r > 1e-5) bad++
                  if ($1 == 1) first = $2 }
    END { printf "%s: %d steps compared, worst relative difference %.3g; first loss %s, fresh %s\n",
                 name, n, w, first, fresh
          exit !(n == 3 && bad == 0 && first < fresh - 0.1) }' <(losses "$ref") <(losses "$dst") || status=1
  consumed=$(sed -n 's/.*"samples_consumed": *\([0-9]*\).*/\1/p' "$dst"/checkpoints/step_000003/metadata.json)
  [ "$consumed" = 24 ] || { echo "FAIL $layout: samples_consumed $consumed after 3 steps, expected 24"; status=1; }
done

refused() {  # refused NAME EXPECTED -- ARGS...: one line, exit 2, no run directory
  local name=$1 expected=$2 err code
  shift 3
  rm -rf runs/${tag}_refused
  err=$(mktemp)
  set +e
  "$trainer" train "$job" --set run.dir=runs/${tag}_refused "$@" >/dev/null 2>"$err"
  code=$?
  set -e
  echo "$name: exit $code: $(cat "$err")"
  [ "$code" = 2 ] && [ "$(wc -l <"$err")" = 1 ] && grep -qF -- "$expected" "$err" &&
    [ ! -e runs/${tag}_refused ] || { echo "FAIL $name"; status=1; }
  rm -f "$err"
}
refused other_model "was saved by a model with other tensors: model.d_ff is 64 in the checkpoint, 65 in this job" \
  -- --set model.init_from="$src" --set model.d_ff=65
rm -rf "$src"_corrupt && cp -r "$src" "$src"_corrupt
shard=$(ls "$src"_corrupt/checkpoints/step_*/rank_00000.safetensors | tail -1)
printf '\x7f' | dd of="$shard" bs=1 seek=$(($(stat -c %s "$shard") - 5)) conv=notrunc status=none
refused corrupt_shard "rank_00000.safetensors" -- --set model.init_from="$src"_corrupt
# A changed RoPE base changes no tensor: a new run may take it (context extension).
dst=runs/${tag}_rope
rm -rf "$dst"
"$trainer" train "$job" --set run.dir="$dst" --set model.init_from="$src" --set train.steps=1 \
  --set model.rope_theta=20000 2>&1 >/dev/null | grep -F "note: model.init_from: model.rope_theta is 10000 in the checkpoint, 20000 in this job" ||
  { echo "FAIL rope_theta: no note"; status=1; }
exit $status
