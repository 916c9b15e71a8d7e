# Included by test/e2e/CMakeLists.txt (after E2E_DIR and its fixtures are set
# up). scripts/gpu_refs.sh and gpu_check.sh's CPU_REFS, STAGES and budget,
# checked without a GPU: see gpu_check_refs.sh. Its shard is the fixtures'
# generated random.bin, so it needs neither data/brown nor Python.
add_test(NAME e2e_gpu_check_refs
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/gpu_check_refs.sh ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:trainer> ${E2E_DIR}/data/random.bin
                 ${CMAKE_CURRENT_BINARY_DIR}/gpu_check_refs)
set_tests_properties(e2e_gpu_check_refs PROPERTIES FIXTURES_REQUIRED e2e_fixtures TIMEOUT 180)
