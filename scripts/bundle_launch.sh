#!/usr/bin/env bash
# launch.sh of a trainer bundle (copied from scripts/bundle_launch.sh): starts N
# ranks of a command on this node without MPI or Slurm, the way an MPI launcher
# would: PMI_RANK / PMI_SIZE / MPI_LOCALRANKID / MPI_LOCALNRANKS per rank (the
# variables trainer's launch detection reads), MASTER_ADDR=127.0.0.1 and
# MASTER_PORT for NCCL's TCP rendezvous. Rank r uses GPU r.
# When one rank fails the others are stopped; the exit status is the first
# failing rank's.
#
# Usage: bin/launch.sh -n N [--port P] [--] COMMAND [ARGS...]
#   e.g. bin/launch.sh -n 8 bin/trainer train configs/gpt2-124m.yaml
# Under Slurm use `srun -n N bin/trainer ...` instead (no launch.sh needed).
set -uo pipefail

usage() { sed -n '/^# Usage:/,/^# Under Slurm/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
N=""
PORT=${MASTER_PORT:-29500}
while (($#)); do
  case $1 in
    -n) N=${2:-}; shift 2 || usage ;;
    --port) PORT=${2:-}; shift 2 || usage ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) break ;;
  esac
done
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "launch.sh: -n: expected a number of ranks >= 1, got '${N}'" >&2; exit 2; }
[[ $PORT =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) ||
  { echo "launch.sh: --port: expected a TCP port, got '$PORT'" >&2; exit 2; }
(($#)) || { echo "launch.sh: no command to launch" >&2; usage; }

pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
}
trap 'stop_all; exit 130' INT TERM
for ((r = 0; r < N; r++)); do
  PMI_RANK=$r PMI_SIZE=$N MPI_LOCALRANKID=$r MPI_LOCALNRANKS=$N \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT "$@" &
  pids+=($!)
done

status=0
remaining=$N
while ((remaining > 0)); do
  wait -n
  rc=$?
  ((remaining--))
  if ((rc != 0 && status == 0)); then
    status=$rc
    echo "launch.sh: a rank exited with $rc; stopping the others" >&2
    stop_all
  fi
done
exit $status
