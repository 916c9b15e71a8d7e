#!/usr/bin/env bash
# launch.sh of a trainer bundle (copied from scripts/bundle_launch.sh): starts N
# ranks of a command on this node without MPI or Slurm, the way an MPI launcher
# would: PMI_RANK / PMI_SIZE / MPI_LOCALRANKID / MPI_LOCALNRANKS per rank (the
# variables trainer's launch detection reads), MASTER_ADDR=127.0.0.1 and
# MASTER_PORT for NCCL's TCP rendezvous. Rank r uses GPU r (its local rank).
#
# Each rank runs in its own process group (setsid), so a signal reaches the
# whole rank, children included. SIGTERM, SIGINT and SIGUSR1 sent to launch.sh
# go to every rank as they are (the trainer saves a checkpoint and exits on
# each), SIGHUP as SIGTERM. When a rank exits non-zero the others get SIGTERM.
# Ranks still running GRACE seconds after a SIGTERM or SIGINT get SIGKILL (a
# rank stuck in a collective does not act on a signal until its watchdog
# fires); SIGUSR1 (Slurm's --signal=USR1@T warning) starts no such clock.
#
# Exit status: the first failing rank's; 0 when every rank exits 0 (also after
# a forwarded SIGTERM that every rank answered by saving and exiting cleanly).
#
# Usage: bin/launch.sh -n N [--port P] [--grace S] [--] COMMAND [ARGS...]
#   -n N       ranks to start (>= 1)
#   --port P   MASTER_PORT for the rendezvous (default $MASTER_PORT, else 29500)
#   --grace S  seconds from SIGTERM to SIGKILL (default 30)
#   e.g. bin/launch.sh -n 8 bin/trainer train configs/gpt2-124m.yaml
# Under Slurm use `srun -n N bin/trainer ...` instead (no launch.sh needed).
set -uo pipefail

usage() { sed -n '/^# Usage:/,/^# Under Slurm/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bad() { echo "launch.sh: $*" >&2; exit 2; }
N=""
PORT=${MASTER_PORT:-29500}
GRACE=30
while (($#)); do
  case $1 in
    -n) (($# >= 2)) || bad "-n needs a number of ranks"; N=$2; shift 2 ;;
    --port) (($# >= 2)) || bad "--port needs a port"; PORT=$2; shift 2 ;;
    --grace) (($# >= 2)) || bad "--grace needs seconds"; GRACE=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    -*) bad "unknown option '$1' (see --help)" ;;
    *) break ;;
  esac
done
[[ $N =~ ^[1-9][0-9]*$ ]] || bad "-n: expected a number of ranks >= 1, got '${N}'"
[[ $PORT =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) || bad "--port: expected a TCP port, got '$PORT'"
[[ $GRACE =~ ^[0-9]+$ ]] || bad "--grace: expected whole seconds, got '$GRACE'"
(($#)) || bad "no command to launch (see --help)"

declare -A rank_of=()  # pid -> rank, for ranks still running
status=0               # the first failing rank's exit status
stopping=0             # a stop signal went to every rank
kill_at=0              # SECONDS when the ranks still running get SIGKILL
group=0                # ranks lead their own process groups
command -v setsid >/dev/null && group=1

signal_ranks() {  # signal_ranks SIG
  local p
  for p in "${!rank_of[@]}"; do
    if ((group)); then kill -s "$1" -- "-$p" 2>/dev/null || kill -s "$1" "$p" 2>/dev/null
    else kill -s "$1" "$p" 2>/dev/null; fi
  done
}
stop_ranks() {  # stop_ranks SIG: SIG to every rank, SIGKILL GRACE seconds after the first
  signal_ranks "$1"
  ((stopping)) && return
  stopping=1
  kill_at=$((SECONDS + GRACE + 1))  # SECONDS counts whole seconds: at least GRACE
}
on_signal() {
  echo "launch.sh: got SIG$1; passing it to the ranks" >&2
  case $1 in
    USR1) signal_ranks USR1 ;;
    HUP) stop_ranks TERM ;;
    *) stop_ranks "$1" ;;
  esac
}
# shellcheck disable=SC2064  # each trap names its own signal, expanded now
for sig in TERM INT HUP USR1; do trap "on_signal $sig" "$sig"; done

for ((r = 0; r < N && !stopping; r++)); do
  if ((group)); then
    PMI_RANK=$r PMI_SIZE=$N MPI_LOCALRANKID=$r MPI_LOCALNRANKS=$N \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT setsid "$@" &
  else
    PMI_RANK=$r PMI_SIZE=$N MPI_LOCALRANKID=$r MPI_LOCALNRANKS=$N \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT "$@" &
  fi
  rank_of[$!]=$r
done
# Until its setsid has run, a rank is a copy of this shell that would swallow a
# signal in its inherited trap: wait (at most 5 s each) until every rank leads
# its own process group, or has already ended.
if ((group)); then
  for p in "${!rank_of[@]}"; do
    for ((i = 0; i < 500; i++)); do
      read -r -a st 2>/dev/null <"/proc/$p/stat" || break
      [[ ${st[4]} == "$p" || ${st[2]} == Z ]] && break
      sleep 0.01
    done
  done
fi

ended() {  # ended PID STATUS
  local r=${rank_of[$1]}
  unset "rank_of[$1]"
  if (($2 != 0 && status == 0)); then
    status=$2
    if ((${#rank_of[@]})); then
      echo "launch.sh: rank $r exited with $2; stopping the others" >&2
      stop_ranks TERM
    fi
  fi
}
running() {  # running PID: not yet exited (a zombie has exited)
  local st
  read -r -a st 2>/dev/null <"/proc/$1/stat" || return 1
  [[ ${st[2]} != Z ]]
}

# Polling, not `wait -n`: bash may reap a child while it runs another command
# and then `wait -n` never reports it, but `wait PID` always returns its status.
while ((${#rank_of[@]})); do
  for p in "${!rank_of[@]}"; do
    running "$p" && continue
    wait "$p"
    ended "$p" $?
  done
  ((${#rank_of[@]})) || break
  if ((stopping && kill_at > 0 && SECONDS >= kill_at)); then
    echo "launch.sh: ${#rank_of[@]} rank(s) still running ${GRACE} s after SIGTERM; killing them" >&2
    signal_ranks KILL
    kill_at=0
  fi
  sleep 0.2
done
exit $status
