# Runs `trainer plan BAD.yaml` and requires exit code 2 and the one line
# "trainer: error: BAD.yaml:<rest>", where <rest> is the file's "# error: <rest>" header.
# Usage: cmake -DTRAINER=... -DSPEC=... -P plan_bad_spec.cmake
file(STRINGS ${SPEC} header LIMIT_COUNT 1)
string(REGEX REPLACE "^# error: " "" rest "${header}")
execute_process(COMMAND ${TRAINER} plan ${SPEC} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "trainer plan ${SPEC}: exit code ${rc}, expected 2\nstdout: ${out}\nstderr: ${err}")
endif()
set(expected "trainer: error: ${SPEC}:${rest}\n")
if(NOT err STREQUAL expected)
  message(FATAL_ERROR "trainer plan ${SPEC}: stderr\n  ${err}expected\n  ${expected}")
endif()
