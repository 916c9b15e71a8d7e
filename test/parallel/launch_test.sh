#!/usr/bin/env bash
# launch_test.sh LAUNCH_SH PROBE: the bundle's launcher (scripts/bundle_launch.sh)
# on CPU ranks of test/parallel/launch_probe.cpp: usage errors exit 2; 4 ranks
# see their rank, world and local rank and get rank 0's bytes through the TCP
# rendezvous (the NCCL id's path, MPI tried first in an MPI build); a failing
# rank's status is returned and the others are stopped; SIGUSR1 and SIGTERM
# reach every rank (which exit 0: so does launch.sh); ranks that ignore
# SIGTERM are killed after --grace; no rank outlives the launcher.
set -uo pipefail
launch=$1 probe=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/launch_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
port() { echo $((20000 + RANDOM % 30000)); }
# Ranks of this test still alive (their command line names $work).
leftovers() { pgrep -f -- "$work" 2>/dev/null | grep -v "^$$\$" || true; }
wait_files() {  # wait_files PATTERN COUNT SECONDS
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    (($(compgen -G "$1" | wc -l) >= $2)) && return 0
    sleep 0.05
  done
  return 1
}

echo "-- usage errors exit 2 with one line"
for args in "-n 0 true" "-n 2" "-n 2 --port 70000 true" "-n x true" "-n 2 --grace -1 true"; do
  # shellcheck disable=SC2086
  bash "$launch" $args >"$work/usage.log" 2>&1
  rc=$?
  ((rc == 2)) || { cat "$work/usage.log"; fail "launch.sh $args exited $rc, expected 2"; }
  grep -q "^launch.sh: " "$work/usage.log" || fail "launch.sh $args: no 'launch.sh:' line"
done

echo "-- 4 ranks: launch variables and rank 0's bytes over the TCP rendezvous"
p=$(port)
timeout 60 bash "$launch" -n 4 --port "$p" "$probe" rendezvous >"$work/rdv.log" 2>&1
rc=$?
cat "$work/rdv.log"
((rc == 0)) || fail "rendezvous run exited $rc"
(($(grep -c '^rank ' "$work/rdv.log") == 4)) || fail "expected 4 rank lines"
for r in 0 1 2 3; do
  grep -q "^rank $r of 4 local $r of 4 via tcp 127.0.0.1:$p payload " "$work/rdv.log" ||
    fail "rank $r: wrong rank, world, local rank or rendezvous address"
done
(($(awk '/^rank /{print $NF}' "$work/rdv.log" | sort -u | wc -l) == 1)) || fail "the ranks got different bytes"
[[ $(awk '/^rank 0 /{print length($NF)}' "$work/rdv.log") == 32 ]] || fail "rank 0's 16 bytes did not arrive"

echo "-- a rank that fails: its status, the others stopped"
start=$(date +%s)
timeout 60 bash "$launch" -n 3 --port "$(port)" "$probe" fail 1 5 "$work" >"$work/fail.log" 2>&1
rc=$?
cat "$work/fail.log"
((rc == 5)) || fail "launch.sh exited $rc, expected rank 1's 5"
(($(date +%s) - start < 30)) || fail "the other ranks were not stopped"
grep -q "rank 1 exited with 5; stopping the others" "$work/fail.log" || fail "no line naming rank 1"
[[ -z $(leftovers) ]] || fail "ranks left running: $(leftovers)"

echo "-- SIGUSR1 and SIGTERM reach every rank"
mkdir "$work/sig"
bash "$launch" -n 3 --port "$(port)" "$probe" wait "$work/sig" >"$work/sig.log" 2>&1 &
lp=$!
wait_files "$work/sig/ready.*" 3 20 || { kill -9 $lp; fail "ranks did not start"; }
kill -USR1 $lp
wait_files "$work/sig/usr1.*" 3 10 || { kill -9 $lp; fail "SIGUSR1 did not reach every rank"; }
kill -TERM $lp
wait $lp
rc=$?
cat "$work/sig.log"
((rc == 0)) || fail "launch.sh exited $rc after every rank stopped cleanly on SIGTERM"
for r in 0 1 2; do
  [[ $(cat "$work/sig/got.$r" 2>/dev/null) == TERM ]] || fail "rank $r did not get SIGTERM"
done
[[ -z $(leftovers) ]] || fail "ranks left running: $(leftovers)"

echo "-- ranks that ignore SIGTERM are killed after --grace"
mkdir "$work/ign"
start=$(date +%s)
timeout 60 bash "$launch" -n 3 --grace 1 --port "$(port)" "$probe" ignore "$work/ign" >"$work/ign.log" 2>&1
rc=$?
cat "$work/ign.log"
((rc == 4)) || fail "launch.sh exited $rc, expected rank 0's 4"
(($(date +%s) - start < 20)) || fail "the ranks ignoring SIGTERM were not killed in time"
grep -q "still running 1 s after SIGTERM; killing them" "$work/ign.log" || fail "no SIGKILL line"
[[ -z $(leftovers) ]] || fail "ranks left running: $(leftovers)"
echo "launch.sh: all checks passed"
