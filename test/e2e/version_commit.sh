#!/usr/bin/env bash
# version_commit.sh SOURCE_DIR TRAINER WORK: `trainer --version` names the
# source tree's HEAD, marked +dirty when tracked files differ from it (test.sh
# builds before testing, so a stale commit there is a build that read it at
# configure time); and cmd/git_commit.cmake, which writes it at every build,
# follows new commits and edits in a scratch repository (the same edits, the
# same marker; other edits, another) and leaves the header untouched (no
# recompile) while nothing changed.
set -euo pipefail
src=$1 trainer=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
if ! head=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null); then
  echo "SKIPPED: $src is not a git work tree"
  exit 77
fi
line=$("$trainer" --version | head -1)
if [[ -n $(git -C "$src" status --porcelain --untracked-files=no) ]]; then
  [[ $line =~ ^"trainer $head+dirty."[0-9a-f]{8}" (" ]] || fail "--version says '$line', HEAD is $head with local changes"
else
  [[ $line == "trainer $head ("* ]] || fail "--version says '$line', HEAD is $head"
fi
echo "--version: $line"
rm -rf "$work" && mkdir -p "$work/repo"
git -C "$work/repo" init -q
commit() { git -C "$work/repo" -c user.name=t -c user.email=t@t commit -q --allow-empty -m "$1"; }
gen() { cmake -DSRC="$work/repo" -DOUT="$work/git_commit.h" -P "$src/cmd/git_commit.cmake"; }
commit one
gen
first=$(git -C "$work/repo" rev-parse --short=12 HEAD)
grep -qx "#define TRAINER_GIT_COMMIT \"$first\"" "$work/git_commit.h" || fail "header: $(cat "$work/git_commit.h")"
touch -d '2000-01-01' "$work/git_commit.h"
gen
[[ $(stat -c %Y "$work/git_commit.h") == $(date -d '2000-01-01' +%s) ]] || fail "the header was rewritten for the same commit"
commit two
gen
second=$(git -C "$work/repo" rev-parse --short=12 HEAD)
grep -qx "#define TRAINER_GIT_COMMIT \"$second\"" "$work/git_commit.h" || fail "after a commit: $(cat "$work/git_commit.h")"
echo a >"$work/repo/f" && git -C "$work/repo" add f && commit three
third=$(git -C "$work/repo" rev-parse --short=12 HEAD)
marker() { gen && sed -n "s/^#define TRAINER_GIT_COMMIT \"$third+dirty\.\([0-9a-f]\{8\}\)\"\$/\1/p" "$work/git_commit.h"; }
echo b >"$work/repo/f"
edit_b=$(marker)
[[ -n $edit_b ]] || fail "an edit is not marked: $(cat "$work/git_commit.h")"
touch -d '2000-01-01' "$work/git_commit.h"
[[ $(marker) == "$edit_b" ]] || fail "the same edit, another marker: $(cat "$work/git_commit.h")"
[[ $(stat -c %Y "$work/git_commit.h") == $(date -d '2000-01-01' +%s) ]] || fail "the header was rewritten for the same edit"
echo c >"$work/repo/f"
edit_c=$(marker)
[[ -n $edit_c && $edit_c != "$edit_b" ]] || fail "another edit, marker '$edit_c' (was $edit_b)"
git -C "$work/repo" add f  # staged changes count too
[[ $(marker) == "$edit_c" ]] || fail "a staged edit: $(cat "$work/git_commit.h")"
echo a >"$work/repo/f" && git -C "$work/repo" add f
gen
grep -qx "#define TRAINER_GIT_COMMIT \"$third\"" "$work/git_commit.h" || fail "edit undone: $(cat "$work/git_commit.h")"
rm -rf "$work/repo/.git"
GIT_CEILING_DIRECTORIES=$work gen  # not the enclosing checkout's HEAD
grep -qx '#define TRAINER_GIT_COMMIT "unknown"' "$work/git_commit.h" || fail "outside git: $(cat "$work/git_commit.h")"
echo "git_commit.cmake: $first, unchanged, then $second, $third+dirty.$edit_b / .$edit_c, $third again, then unknown outside git"
