#!/usr/bin/env bash
# launch_mpirun_test.sh TRAINER SOURCE_DIR WORK_DIR: scripts/launch_mpirun.sh
# parses host lists and hostfiles into the right mpirun command (dry runs for
# 2 and 3 hosts), and on this host trains 2 ranks from a hostfile with the
# same losses (1e-5 relative) as one rank.
set -euo pipefail
trainer=$(realpath "$1") src=$(realpath "$2") work=$3
launch=$src/scripts/launch_mpirun.sh
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
fail() { echo "launch_mpirun_test: FAILED: $*"; exit 1; }
command -v mpirun >/dev/null || { echo "launch_mpirun_test: SKIPPED: no mpirun"; exit 77; }
mpirun --version 2>&1 | grep -q "Open MPI" || { echo "launch_mpirun_test: SKIPPED: the checks below assume Open MPI's mpirun"; exit 77; }

# Dry runs: rank count, per-host slots, placement, rendezvous and environment.
cmd=$(OMP_NUM_THREADS=3 NCCL_IB_HCA=mlx5_0 TRAINER=/x/trainer "$launch" --dry-run -H gpu01,gpu02 -n 8 job.yaml --set a=1 2>/dev/null)
for want in "-np 16 " "--host gpu01:8,gpu02:8 " "--map-by ppr:8:node " "-x OMP_NUM_THREADS " "-x MASTER_ADDR " \
            "-x NCCL_IB_HCA " "/x/trainer train job.yaml --set a=1"; do
  [[ $cmd == *"$want"* ]] || fail "-H gpu01,gpu02 -n 8: '$want' missing from: $cmd"
done
printf '# three nodes\ngpu07 slots=8\n\ngpu08   # spare\ngpu09 slots=8\n' >"$work/hosts.txt"
msg=$("$launch" --dry-run --hostfile "$work/hosts.txt" -n 4 job.yaml 2>&1 >/dev/null)
[[ $msg == *"12 ranks on 3 node(s) (4 per node), MASTER_ADDR=gpu07:29500"* ]] || fail "hostfile: got '$msg'"
cmd=$("$launch" --dry-run --hostfile "$work/hosts.txt" -n 4 job.yaml 2>/dev/null)
[[ $cmd == *"--host gpu07:4,gpu08:4,gpu09:4 "* ]] || fail "hostfile: got $cmd"
# Bad input: one line, exit 2.
for bad in "-n 0 job.yaml" "--hostfile $work/nosuch job.yaml" "-n 2" "--bogus job.yaml"; do
  set +e; out=$("$launch" $bad 2>&1); rc=$?; set -e
  [ "$rc" = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] || fail "'$bad': expected one line and exit 2, got $rc: $out"
done

# A real run: 2 ranks on this host from a hostfile, against one rank.
bash "$src/test/slurm/make_job.sh" "$work"
cd "$work"
hostname -s >hosts.local
OMP_NUM_THREADS=1 "$trainer" train job.yaml --set run.dir=runs/one >one.log 2>&1 || { cat one.log; fail "one rank"; }
TRAINER=$trainer MPIRUN_ARGS=--oversubscribe "$launch" --hostfile hosts.local -n 2 job.yaml --set run.dir=runs/two \
  >two.log 2>&1 || { cat two.log; fail "2 ranks through launch_mpirun.sh"; }
grep -q '^mesh: world 2 = tp 1 x cp 1 x dp 2' two.log || { cat two.log; fail "no 'mesh: world 2' line"; }
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"loss": \([^,}]*\).*/\1/'; }
paste <(losses runs/one) <(losses runs/two) | awk '
  { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r; if (r > 1e-5) bad++ }
  END { printf "launch_mpirun_test: %d steps, worst relative loss difference 1 vs 2 ranks %.3g\n", n, worst
        exit !(n == 30 && bad == 0) }' || fail "2 ranks do not reproduce the one-rank losses"
echo "launch_mpirun_test: PASS"
