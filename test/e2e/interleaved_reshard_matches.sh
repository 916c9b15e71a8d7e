#!/usr/bin/env bash
# interleaved_reshard_matches.sh FIXTURES TRAINER MPIEXEC: checkpoints move
# between the interleaved pipeline (pp 2 x virtual_stages 2, tied GPT-2: rank
# 0 holds layers 0 and 2, rank 1 layers 1 and 3 and the head's copy of the
# table) and one rank, both ways. A pp2 x v2 run's step-10 checkpoint resumes
# on one rank, a one-rank run's on pp2 x v2, and each continues with its
# saving run's losses within 1e-5 relative. Both saving runs evaluate at steps
# 10 and 20: the interleaved evaluation must give the one-rank validation loss.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3
cd "$fx"
export OMP_NUM_THREADS=1
job=(mesh_gpt2_l4.yaml --set train.steps=20 --set checkpoint.every=10 --set data.val=data/random.bin
     --set train.eval_every=10 --set train.eval_batches=4)
interleaved=(--set parallel.pp=2 --set parallel.pp_schedule=interleaved --set parallel.virtual_stages=2)
rm -rf runs/ileave_*
run() {  # run NP DIR [ARGS...]
  local np=$1 dir=$2
  shift 2
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "${job[@]}" \
    --set run.dir="$dir" "$@" >/dev/null
}
run 2 runs/ileave_src_v2 "${interleaved[@]}"
run 1 runs/ileave_src_1
run 1 runs/ileave_v2_to_1 --set checkpoint.resume=runs/ileave_src_v2/checkpoints/step_000010
run 2 runs/ileave_1_to_v2 "${interleaved[@]}" \
  --set checkpoint.resume=runs/ileave_src_1/checkpoints/step_000010
# KEY lines of a metrics.jsonl as "step value".
column() { grep "\"$2\"" "$1/metrics.jsonl" | sed "s/.*\"step\": \([0-9]*\), \"$2\": \([^,}]*\).*/\1 \2/"; }
compare() {  # compare NAME WANT_COUNT REF GOT
  awk -v name="$1" -v want="$2" 'NR == FNR { ref[$1] = $2; next }
    ($1 in ref) { n++; d = ref[$1] - $2; if (d < 0) d = -d; r = d / ref[$1]; if (r > w) w = r; if (r > 1e-5) bad++ }
    END { printf "%s: %d compared, worst relative difference %.3g\n", name, n, w;
          exit !(n == want && bad == 0) }' <(echo "$3") <(echo "$4")
}
status=0
compare "pp2 x v2 -> one rank, steps 11-20" 10 "$(column runs/ileave_src_v2 loss)" \
  "$(column runs/ileave_v2_to_1 loss)" || status=1
compare "one rank -> pp2 x v2, steps 11-20" 10 "$(column runs/ileave_src_1 loss)" \
  "$(column runs/ileave_1_to_v2 loss)" || status=1
compare "pp2 x v2 vs one rank, steps 1-20" 20 "$(column runs/ileave_src_1 loss)" \
  "$(column runs/ileave_src_v2 loss)" || status=1
compare "pp2 x v2 vs one rank, val loss at 10 and 20" 2 "$(column runs/ileave_src_1 val_loss)" \
  "$(column runs/ileave_src_v2 val_loss)" || status=1
exit $status
