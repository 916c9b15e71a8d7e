#!/usr/bin/env bash
# ep_reshard_matches.sh FIXTURES TRAINER MPIEXEC: checkpoints of the MoE
# Llama (aux-free bias, shared expert) move between expert-parallel and
# single-rank layouts: a one-rank checkpoint resumes on ep 2 and on ep 2 x dp 2
# (ZeRO-1: experts' state over edp, the rest over dp), an ep 2 checkpoint (each rank writes its own
# experts under their global names) resumes on one rank and on ep 4, and an
# ep 2 x dp 2 checkpoint (state sharded by part) on one rank, and a
# tp 2 + sequence-parallel x ep 2 checkpoint on one rank and back; each
# continues with the one-rank run's losses within 1e-5 relative.
set -euo pipefail
fx=$1 trainer=$2 mpiexec=$3
cd "$fx"
export OMP_NUM_THREADS=1
job=(mesh_moe_llama.yaml --set train.steps=20 --set checkpoint.every=10)
rm -rf runs/epreshard_*
run() {  # run NP DIR [ARGS...]
  local np=$1 dir=$2
  shift 2
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$trainer" train "${job[@]}" \
    --set run.dir="$dir" "$@" >/dev/null
}
"$trainer" train "${job[@]}" --set run.dir=runs/epreshard_one >/dev/null
run 2 runs/epreshard_ep2 --set parallel.ep=2
run 4 runs/epreshard_ep2dp2 --set parallel.ep=2
sp=(--set parallel.tp=2 --set parallel.ep=2 --set parallel.sequence_parallel=true)
run 4 runs/epreshard_tp2spep2 "${sp[@]}"
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
status=0
for layout in "one 2 --set parallel.ep=2" "one 4 --set parallel.ep=2" "ep2 1" \
  "ep2 4 --set parallel.ep=4" "ep2dp2 1" "tp2spep2 1" "one 4 ${sp[*]}"; do
  read -r from np extra <<<"$layout"
  dst=runs/epreshard_${from}_to_np${np}_$(echo "$extra" | tr -c 'a-z0-9' '_')
  # shellcheck disable=SC2086
  run "$np" "$dst" --set checkpoint.resume="runs/epreshard_$from/checkpoints/step_000010" $extra
  awk -v name="$from -> np $np $extra" 'NR == FNR { ref[$1] = $2; next }
    ($1 in ref) { n++; d = ref[$1] - $2; if (d < 0) d = -d; r = d / ref[$1]; if (r > w) w = r; if (r > 1e-5) bad++ }
    END { printf "%s: steps 11-20 compared %d, worst relative difference %.3g\n", name, n, w;
          exit !(n == 10 && bad == 0) }' <(losses runs/epreshard_one) <(losses "$dst") || status=1
done
exit $status
