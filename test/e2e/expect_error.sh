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
# A private folder of links to the fixtures: the run-directory check looks at
# its own runs/, never wiping the shared fixtures' runs/ that other e2e tests
# (run in parallel under ctest -j) are writing.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/expect_error.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
for f in "$workdir"/*; do
  [ "$(basename "$f")" = runs ] || ln -s "$f" "$scratch/"
done
cd "$scratch" || exit 1
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
