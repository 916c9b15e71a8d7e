#!/usr/bin/env bash
# launch_mpirun.sh: `trainer train` over a plain host list with mpirun (Open
# MPI, or MPICH / Intel MPI's hydra), one rank per GPU, no scheduler needed.
#
#   scripts/launch_mpirun.sh -H node1,node2 -n 8 JOB.yaml [--set key=value ...]
#   scripts/launch_mpirun.sh --hostfile hosts.txt -n 8 JOB.yaml
#   scripts/launch_mpirun.sh -n 2 configs/tiny-gpt2.yaml --set run.device=cpu   # this host, 2 ranks
#
#   -H, --hosts LIST      comma-separated hosts (default: this host)
#   -f, --hostfile FILE   one host per line; "#" comments and "slots=" ignored
#   -n, --per-node N      ranks per node = GPUs per node (default 1)
#   --dry-run             print the mpirun command instead of running it
#
# Environment: TRAINER (default build/trainer), MPIRUN (default mpirun),
# MPIRUN_ARGS (extra launcher options, e.g. "--oversubscribe" or
# "--mca btl_tcp_if_include ib0"), OMP_NUM_THREADS (default 1), MASTER_ADDR
# (default: the first host), MASTER_PORT (default 29500), NCCL_DEBUG (default
# WARN); every NCCL_* and UCX_* variable set here is passed to all ranks.
# Every host needs the same paths (trainer, job, data) and passwordless ssh.
set -euo pipefail

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
hosts="" hostfile="" per_node=1 dry=0
while [ $# -gt 0 ]; do
  case $1 in
    -H|--hosts) hosts=${2:?}; shift 2 ;;
    -f|--hostfile) hostfile=${2:?}; shift 2 ;;
    -n|--per-node) per_node=${2:?}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "launch_mpirun.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "launch_mpirun.sh: missing JOB.yaml (see --help)" >&2; exit 2; }
[[ $per_node =~ ^[1-9][0-9]*$ ]] || { echo "launch_mpirun.sh: --per-node: expected a positive integer, got '$per_node'" >&2; exit 2; }
if [ -n "$hostfile" ]; then
  [ -r "$hostfile" ] || { echo "launch_mpirun.sh: --hostfile $hostfile: cannot read" >&2; exit 2; }
  hosts=$(sed 's/#.*//' "$hostfile" | awk 'NF { print $1 }' | paste -sd, -)
  [ -n "$hosts" ] || { echo "launch_mpirun.sh: --hostfile $hostfile: no hosts in it" >&2; exit 2; }
fi
[ -n "$hosts" ] || hosts=$(hostname -s)
IFS=, read -r -a host_array <<<"$hosts"
nodes=${#host_array[@]}
np=$((nodes * per_node))

TRAINER=${TRAINER:-build/trainer}
MPIRUN=${MPIRUN:-mpirun}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MASTER_ADDR=${MASTER_ADDR:-${host_array[0]}}
export MASTER_PORT=${MASTER_PORT:-29500}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
pass_env=(OMP_NUM_THREADS MASTER_ADDR MASTER_PORT PATH LD_LIBRARY_PATH)
pass_env+=($(env | sed -n 's/^\(\(NCCL\|UCX\)_[A-Za-z0-9_]*\)=.*/\1/p'))

read -r -a extra <<<"${MPIRUN_ARGS:-}"
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
  # ppr:N:node places N consecutive ranks per host, so OMPI_COMM_WORLD_LOCAL_RANK
  # is the GPU. --bind-to none leaves each rank's OpenMP threads free to spread.
  host_slots=$(printf '%s\n' "${host_array[@]}" | sed "s/\$/:$per_node/" | paste -sd, -)
  cmd=("$MPIRUN" -np "$np" --host "$host_slots" --map-by "ppr:$per_node:node" --bind-to none)
  [ "$(id -u)" = 0 ] && cmd+=(--allow-run-as-root)
  for v in "${pass_env[@]}"; do [ -n "${!v+x}" ] && cmd+=(-x "$v"); done
else
  # MPICH / Intel MPI (hydra): ranks find themselves through PMI_RANK.
  cmd=("$MPIRUN" -np "$np" -hosts "$hosts" -ppn "$per_node")
  for v in "${pass_env[@]}"; do [ -n "${!v+x}" ] && cmd+=(-genv "$v" "${!v}"); done
fi
cmd+=("${extra[@]}" "$TRAINER" train "$@")

echo "launch_mpirun.sh: $np ranks on $nodes node(s) ($per_node per node), MASTER_ADDR=$MASTER_ADDR:$MASTER_PORT" >&2
if [ "$dry" = 1 ]; then
  # Shell-quoted only where needed, so the line reads as typed and pastes back.
  for a in "${cmd[@]}"; do
    if [[ $a =~ ^[A-Za-z0-9_./:,=@%+-]+$ ]]; then printf '%s ' "$a"; else printf '%q ' "$a"; fi
  done
  echo
  exit 0
fi
exec "${cmd[@]}"
