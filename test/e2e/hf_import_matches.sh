#!/usr/bin/env bash
# hf_import_matches.sh FIXTURES TRAINER MPIEXEC JOB "LAYOUT": exports a
# 5-step one-rank run of JOB as a Hugging Face model, starts JOB from it
# (model.init_from) on one rank and on LAYOUT ("NP [--set ...]"), and
# requires the same losses within 1e-5 relative: the import must give every
# rank exactly its part of each tensor (a KV head's rows when heads are
# replicated over tp, a ZeRO-3 rank its shard). HF_EXPORT_ARGS: more export
# options (--dtype fp8: each rank dequantizes its part of every fp8 block).
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 job=$4 layout=$5
cd "$fx"
export OMP_NUM_THREADS=1
tag=$(echo "$job $layout" | tr -c 'a-zA-Z0-9' '_')
base=runs/kvhf_base_$tag hf=runs/kvhf_model_$tag ref=runs/kvhf_ref_$tag dst=runs/kvhf_dst_$tag
rm -rf "$base" "$hf" "$ref" "$dst"
"$trainer" train "$job" --set run.dir="$base" --set train.steps=5 --set checkpoint.every=5 >/dev/null
# shellcheck disable=SC2086
"$trainer" export "$base/checkpoints/step_000005" --format hf --out "$hf" ${HF_EXPORT_ARGS:-} >/dev/null
"$trainer" train "$job" --set run.dir="$ref" --set model.init_from="$hf" >/dev/null
read -r np extra <<<"$layout"
# shellcheck disable=SC2086
"$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "$job" \
  --set run.dir="$dst" --set model.init_from="$hf" $extra >/dev/null
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
# The import took effect: step 1 starts from the trained weights, not a fresh init.
first() { losses "$1" | awk 'NR == 1 { print $2 }'; }
[ "$(first "$base")" != "$(first "$ref")" ] || { echo "init_from changed nothing"; exit 1; }
awk -v name="init_from on $layout" 'NR == FNR { ref[$1] = $2; next }
  ($1 in ref) { n++; d = ref[$1] - $2; if (d < 0) d = -d; r = d / ref[$1]; if (r > w) w = r; if (r > 1e-5) bad++ }
  END { printf "%s: %d steps compared, worst relative difference %.3g\n", name, n, w;
        exit !(n == 20 && bad == 0) }' <(losses "$ref") <(losses "$dst")
