# cmake -DSRC=<source tree> -DOUT=<header> -P git_commit.cmake: writes OUT with
# the tree's HEAD as TRAINER_GIT_COMMIT (trainer --version), at every build
# rather than at configure time: a build dir configured at one commit and
# rebuilt at another used to report the first, and gpu_refs.sh's stamp (which
# reads --version) then matched CPU references made from older code. OUT is
# rewritten only when the text changed, so nothing recompiles otherwise.
#
# A tree with changes to tracked files gets "+dirty.<8 hex>", the SHA-1 of
# `git diff HEAD`: a binary built from local edits must not pass for HEAD's,
# and two builds of the same edits name the same code (a bare "-dirty" would
# let references from one set of edits match a binary from another).
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit)
  set(commit unknown)
else()
  execute_process(COMMAND git diff HEAD --no-color --no-ext-diff --binary WORKING_DIRECTORY ${SRC}
    OUTPUT_VARIABLE diff RESULT_VARIABLE diff_rc ERROR_QUIET)
  if(NOT diff_rc EQUAL 0)
    set(commit "${commit}+dirty.unknown")
  elseif(NOT diff STREQUAL "")
    string(SHA1 diff_sha "${diff}")
    string(SUBSTRING "${diff_sha}" 0 8 diff_sha)
    set(commit "${commit}+dirty.${diff_sha}")
  endif()
endif()
set(text "#define TRAINER_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
