# Sourced: `enter_private_fixtures FIXTURES NAME` makes a private folder of links
# to the fixtures (all but runs/), removed on exit, and changes into it. A test
# that checks "no run directory was written" looks at its own runs/, never
# wiping the shared fixtures' runs/ that other e2e tests (run in parallel under
# ctest -j) are writing.
enter_private_fixtures() {
  local f links=()
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/$2.XXXXXX") || exit 1
  trap 'rm -rf "$scratch"' EXIT
  # One ln for all: a basename and an ln per fixture were 0.6 s of forks an entry.
  for f in "$1"/*; do
    [[ ${f##*/} == runs ]] || links+=("$f")
  done
  ln -s "${links[@]}" "$scratch/" || exit 1
  cd "$scratch" || exit 1
}
