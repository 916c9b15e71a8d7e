#!/usr/bin/env bash
# Runs parallel_mpi_stall on 4 ranks with rank 2 stalling and a 2 s watchdog
# (MODE "op": in an all_reduce on dp; "init": before the mesh is built):
# the job must end non-zero within the timeout plus a few seconds, a rank must
# name rank, axis and op in one line, and no process of the run may be left.
set -u
mpiexec=$1
prog=$2
mode=${3:-op}
timeout_s=2
tag="stalltest$$"   # a unique argument to find this run's processes afterwards
start=$(date +%s.%N)
out=$(TRAINER_TEST_STALL_RANK=2 OMP_NUM_THREADS=1 timeout 60 "$mpiexec" --allow-run-as-root \
      --oversubscribe -np 4 "$prog" "$timeout_s" "$mode" "$tag" 2>&1)
rc=$?
end=$(date +%s.%N)
elapsed=$(echo "$end - $start" | bc)
echo "$out"
echo "exit code $rc after $elapsed s"
fail=0
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then echo "FAIL: exit code $rc (expected non-zero, not a timeout)"; fail=1; fi
if [ "$mode" = init ]; then
  expected="trainer: watchdog: rank [013]: MPI_Init/MPI_Comm_dup on axis world \(group rank [013] of 4\) has not finished after [0-9.]+ s \(timeout 2 s\); aborting"
else
  expected="trainer: watchdog: rank [013]: all_reduce on axis dp \(group rank [013] of 4\) has not finished after [0-9.]+ s \(timeout 2 s\); aborting"
fi
if ! echo "$out" | grep -Eq "$expected"; then
  echo "FAIL: no watchdog line naming rank, axis and op"; fail=1
fi
if echo "$out" | grep -q "finished without the watchdog"; then echo "FAIL: a rank finished"; fail=1; fi
if [ "$(echo "$elapsed > $timeout_s + 8" | bc)" -eq 1 ]; then echo "FAIL: took $elapsed s"; fail=1; fi
sleep 0.5
if pgrep -f "$tag" > /dev/null; then
  echo "FAIL: processes left:"; pgrep -af "$tag"; fail=1
fi
exit $fail
