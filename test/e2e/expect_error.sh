#!/usr/bin/env bash
# expect_error.sh WORKDIR EXPECTED -- COMMAND...: runs COMMAND beside the
# bad-input fixtures make_fixtures.sh wrote in WORKDIR (linked into a scratch folder)
# and passes when it exits 2, prints exactly one line on stderr containing
# EXPECTED, and leaves no run directory behind (the third argument
# --run-dir-ok allows one: errors found while drawing samples come after start;
# --no-gpu skips the test, exit 77, where a GPU is visible).
set -u
workdir=$1 expected=$2 mode=$3
shift 3
if [ "$mode" = --no-gpu ] && nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: a GPU is visible"
  exit 77
fi
source "$(dirname "$0")/private_fixtures.sh"
enter_private_fixtures "$workdir" expect_error
stderr=$(mktemp)
"$@" >/dev/null 2>"$stderr"
code=$?
lines=$(wc -l <"$stderr")
msg=$(cat "$stderr")
rm -f "$stderr"
fail=0
[ "$code" = 2 ] || { echo "FAIL: exit code $code, expected 2"; fail=1; }
[ "$lines" = 1 ] || { echo "FAIL: $lines lines on stderr, expected 1"; fail=1; }
case "$msg" in *"$expected"*) ;; *) echo "FAIL: message lacks '$expected'"; fail=1 ;; esac
[ "$mode" = --run-dir-ok ] || [ ! -e runs ] || { echo "FAIL: a run directory was written"; fail=1; }
echo "stderr: $msg"
exit $fail
