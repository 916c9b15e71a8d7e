#!/usr/bin/env bash
# gpu_refs.sh OUT_DIR [TRAINER_BIN]: the CPU halves of gpu_check.sh's training
# pairs (scripts/gpu_stages.sh), run here so that the leased GPU machine spends
# its minutes on the GPU: OUT_DIR/NAME_cpu.txt ("step loss" lines) per pair and
# OUT_DIR/stamp, written last, which gpu_check compares with the binary it runs
# (CPU_REFS=OUT_DIR). Make them with the binary that goes to the GPU machine
# (a bundle's bin/trainer: --version says mpi no, the dev build's says yes).
# Took 126 s and 151 s on the 2-core development machine (2026-12-02, the cores
# shared with another engineer's builds; the emulated bf16 pair 55 s each time):
# time a lease no longer pays.
# TRAINER_BIN defaults to build/trainer; GPU_CHECK_STEPS caps the steps (tests).
# Exit 0 when every pair trained, 1 when one failed (no stamp then), 2 on usage.
set -uo pipefail
usage() { echo "usage: gpu_refs.sh OUT_DIR [TRAINER_BIN]" >&2; exit 2; }
(( $# == 1 || $# == 2 )) || usage
out=$1 trainer=${2:-build/trainer}
[[ $out == /* ]] || out=$PWD/$out
cd "$(dirname "$0")/.." || exit 1
# A relative TRAINER_BIN is the caller's, unless only the root has it (the default).
[[ $trainer == /* || ! -e $OLDPWD/$trainer ]] || trainer=$OLDPWD/$trainer
# shellcheck source=scripts/gpu_stages.sh
. scripts/gpu_stages.sh
[[ -x $trainer ]] || { echo "gpu_refs: no trainer binary at $trainer" >&2; exit 2; }
ls data/brown/train_*.bin >/dev/null 2>&1 ||
  { echo "gpu_refs: data/brown missing under $(pwd) (scripts/get_data.sh)" >&2; exit 2; }
mkdir -p "$out" || exit 2
rm -f "$out/stamp" "$out"/*_cpu.txt
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_refs.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
start=$(date +%s) failed=0
for row in "${GPU_PAIRS[@]}"; do
  IFS='|' read -r name _ <<<"$row"
  gpu_pair "$name" cpu "$work/$name"
  t0=$(date +%s)
  if "$trainer" "${PAIR_ARGS[@]}" >"$work/$name.log" 2>&1; then
    gpu_losses "$work/$name/metrics.jsonl" >"$out/${name}_cpu.txt"
    echo "gpu_refs: $name: $PAIR_STEPS steps in $PAIR_PREC, $(( $(date +%s) - t0 )) s"
  else
    tail -5 "$work/$name.log"
    echo "gpu_refs: $name: the CPU run failed (log above)" >&2
    failed=1
  fi
done
(( failed )) && exit 1
if ! gpu_refs_stamp "$trainer" >"$out/stamp.tmp"; then
  echo "gpu_refs: '$trainer --version' failed" >&2
  exit 1
fi
mv "$out/stamp.tmp" "$out/stamp"
echo "gpu_refs: ${#GPU_PAIRS[@]} CPU references in $out, $(( $(date +%s) - start )) s; stamp:"
cat "$out/stamp"
