# Sourced: `enter_private_fixtures FIXTURES NAME` makes a private folder of links
# to the fixtures (all but runs/), removed on exit, and changes into it. A test
# that checks "no run directory was written" looks at its own runs/, never
# wiping the shared fixtures' runs/ that other e2e tests (run in parallel under
# ctest -j) are writing.
enter_private_fixtures() {
  local f
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/$2.XXXXXX") || exit 1
  trap 'rm -rf "$scratch"' EXIT
  for f in "$1"/*; do
    [ "$(basename "$f")" = runs ] || ln -s "$f" "$scratch/"
  done
  cd "$scratch" || exit 1
}
