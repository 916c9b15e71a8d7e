#!/usr/bin/env bash
# one_error_line.sh FIXTURES TRAINER MPIEXEC: bad input on a multi-rank job is
# one line, not one per rank (cmd/input_error_report.h). Every rank finding the
# same fault, before the mesh (a wrong key) and after it (a missing data file):
# exactly one "trainer: error:" line, rank 0's, exit 2. One rank's own fault
# (mpirun's MPMD form gives rank 1 another job): that rank's line, naming its
# rank and host, after its wait, exit 2.
set -u
fixtures=$1 trainer=$2 mpiexec=$3
source "$(dirname "$0")/private_fixtures.sh"
enter_private_fixtures "$fixtures" one_error_line
mpi=("$mpiexec" --allow-run-as-root --oversubscribe)
export OMP_NUM_THREADS=1
fail=0

# check NAME EXPECTED_IN_LINE RANK_PREFIX(yes|no) -- COMMAND...
check() {
  local name=$1 expected=$2 prefixed=$3
  shift 4
  local err code lines line
  err=$(mktemp)
  timeout 120 "$@" >/dev/null 2>"$err"
  code=$?
  lines=$(grep -c '^trainer: error' "$err")
  line=$(grep '^trainer: error' "$err" | head -1)
  echo "$name: exit $code, $lines error line(s): $line"
  [ "$code" = 2 ] || { echo "FAIL $name: exit code $code, expected 2"; fail=1; }
  [ "$lines" = 1 ] || { echo "FAIL $name: $lines error lines, expected 1"; cat "$err"; fail=1; }
  case "$line" in *"$expected"*) ;; *) echo "FAIL $name: line lacks '$expected'"; fail=1 ;; esac
  if [ "$prefixed" = yes ]; then
    case "$line" in "trainer: error: rank 1 of 2 ("*"): "*) ;;
      *) echo "FAIL $name: the line does not name rank 1 and its host"; fail=1 ;; esac
  else
    case "$line" in *"rank "*" of "*) echo "FAIL $name: rank 0's line names a rank"; fail=1 ;; esac
  fi
  rm -f "$err"
}

check all_ranks_bad_key "did you mean 'model.n_layer'" no -- \
  "${mpi[@]}" -np 4 "$trainer" train unknown_key.yaml
check all_ranks_missing_data "data/missing_*.bin" no -- \
  "${mpi[@]}" -np 2 "$trainer" train missing_data.yaml
[ ! -e runs ] || { echo "FAIL: a run directory was written"; fail=1; }
# Rank 0 builds the mesh and waits in a collective; rank 1 fails after it.
check one_rank_missing_data "data/missing_*.bin" yes -- \
  "${mpi[@]}" -np 1 "$trainer" train good.yaml : -np 1 "$trainer" train missing_data.yaml
# Rank 1 fails before the mesh, while rank 0 waits for it to join.
check one_rank_bad_key "did you mean 'model.n_layer'" yes -- \
  "${mpi[@]}" -np 1 "$trainer" train good.yaml : -np 1 "$trainer" train unknown_key.yaml
exit $fail
