#!/usr/bin/env bash
# fp8_state_matches.sh FIXTURES TRAINER MPIEXEC FP8_STATE_CHECK JOB "LAYOUT" RTOL WEIGHT_RTOL:
# trains JOB one step on one rank and on LAYOUT ("NP [--set ...]"), each
# saving it, and requires every fp8 scaling state (scale and amax history) of
# the one-rank checkpoint in the mesh's within RTOL, weights' within
# WEIGHT_RTOL (fp8_state_check). One step: the update of step 1 quantises
# with the initial scales (1), which a mesh's gradient share meets a power of
# two apart, so later amaxes drift apart with fp8's own rounding.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3 check=$4 job=$5 layout=$6 rtol=$7 wrtol=$8
cd "$fx"
export OMP_NUM_THREADS=1
tag=$(echo "$job $layout" | tr -c 'a-zA-Z0-9' '_')
ref=runs/fp8ref_$tag mesh=runs/fp8mesh_$tag
rm -rf "$ref" "$mesh"
"$trainer" train "$job" --set run.dir="$ref" --set train.steps=1 --set checkpoint.every=1 >/dev/null
read -r np extra <<<"$layout"
# shellcheck disable=SC2086
"$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "$job" \
  --set run.dir="$mesh" --set train.steps=1 --set checkpoint.every=1 $extra >/dev/null
"$check" "$ref/checkpoints/step_000001" "$mesh/checkpoints/step_000001" "$rtol" "$wrtol"
