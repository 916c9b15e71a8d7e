# cmake -DSRC=<source tree> -DOUT=<header> -P git_commit.cmake: writes OUT with
# the tree's HEAD as TRAINER_GIT_COMMIT (trainer --version), at every build
# rather than at configure time: a build dir configured at one commit and
# rebuilt at another used to report the first, and gpu_refs.sh's stamp (which
# reads --version) then matched CPU references made from older code. OUT is
# rewritten only when the commit changed, so nothing recompiles otherwise.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit)
  set(commit unknown)
endif()
set(text "#define TRAINER_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
