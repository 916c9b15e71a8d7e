# The CUDA emulator (-DTRAINER_CUDA_EMULATOR=ON; included by the top-level CMakeLists.txt
# before kernels/, its self-tests are test/cuda_emu/CMakeLists.txt): the CUDA backend's own sources
# (kernels/cuda) built by the host compiler against a host runtime, cuBLASLt and
# cub, so the [cuda] suite and GPU training runs execute in CI without a GPU.
# It proves the kernels' logic (indexing, barriers, warp collectives, launch
# limits, what they write) against the CPU ops; a GPU still has the last word on
# speed, real tensor-core fragments and the real libraries' numerics.
set(_emu_dir ${CMAKE_SOURCE_DIR}/test/cuda_emu)

# -DTRAINER_CUDA_EMULATOR_ASAN=ON: AddressSanitizer on what links
# trainer_emu_asan (the emulator, kernels/cuda, the [cuda] and emulator tests),
# the runtime in every binary. The CPU side (CPU ops, engine) stays
# uninstrumented: its `omp simd` reductions keep their vectorised summation
# order (ASan's checks stop GCC vectorising some of them), so the CPU
# references the [cuda] suite and e2e_cuda_matches_cpu_* compare against are
# the same numbers as in every other build, and the CPU halves run at full speed.
add_library(trainer_emu_asan INTERFACE)
if(TRAINER_CUDA_EMULATOR_ASAN)
  # -g1: line tables only, so a report names the kernel's file and line.
  # -fsanitize=alignment: a GPU faults on a misaligned access (a uint4 copy at
  # an address not a multiple of 16, a float at one not a multiple of 4) where
  # x86 reads it silently, so the emulated kernels stop on it as a GPU would.
  target_compile_options(trainer_emu_asan INTERFACE -fsanitize=address,alignment
                         -fno-sanitize-recover=alignment -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=address,alignment)
  # cuBLASLt's loops, a tenth of an emulated attention test under ASan: every
  # operand's whole span is checked against one live allocation before they
  # run (require_device_range), so per-element checks would add nothing.
  set_source_files_properties(${_emu_dir}/cublaslt.cpp PROPERTIES COMPILE_OPTIONS -fno-sanitize=address)
endif()
add_library(trainer_cuda_emu STATIC ${_emu_dir}/runtime.cpp ${_emu_dir}/streams.cpp ${_emu_dir}/scheduler.cpp
            ${_emu_dir}/cublaslt.cpp)
target_include_directories(trainer_cuda_emu PUBLIC ${_emu_dir}/include)
target_compile_options(trainer_cuda_emu PUBLIC -ffp-contract=off)
target_link_libraries(trainer_cuda_emu PRIVATE trainer_warnings trainer_emu_asan)

# NCCL over MPI (nccl.cpp), when MPI is found: GPU ranks launched by mpirun then
# run trainer's NCCL communicator (parallel/CMakeLists.txt links it).
if(MPI_CXX_FOUND)
  add_library(trainer_nccl_emu STATIC ${_emu_dir}/nccl.cpp)
  target_link_libraries(trainer_nccl_emu PUBLIC trainer_cuda_emu MPI::MPI_CXX
                        PRIVATE trainer_warnings trainer_emu_asan)
endif()

# trainer_emulated_cuda_sources(OUT_VAR file.cu ...): each .cu/.cuh rewritten
# (rewrite_cu.cmake) under the build tree at the same relative path; the .cu
# files become .cu.cpp sources, the .cuh files headers found first on the
# include path (${TRAINER_CUDA_EMU_SRC}).
set(TRAINER_CUDA_EMU_SRC ${CMAKE_BINARY_DIR}/cuda_emu_src CACHE INTERNAL "")
function(trainer_emulated_cuda_sources out_var)
  set(_outs)
  foreach(_in ${ARGN})
    file(RELATIVE_PATH _rel ${CMAKE_SOURCE_DIR} ${_in})
    if(_in MATCHES "\\.cu$")
      set(_out ${TRAINER_CUDA_EMU_SRC}/${_rel}.cpp)
    else()
      set(_out ${TRAINER_CUDA_EMU_SRC}/${_rel})
    endif()
    add_custom_command(OUTPUT ${_out}
      COMMAND ${CMAKE_COMMAND} -DIN=${_in} -DOUT=${_out}
              -P ${CMAKE_SOURCE_DIR}/test/cuda_emu/rewrite_cu.cmake
      DEPENDS ${_in} ${CMAKE_SOURCE_DIR}/test/cuda_emu/rewrite_cu.cmake
      COMMENT "emulator: rewriting ${_rel}" VERBATIM)
    list(APPEND _outs ${_out})
  endforeach()
  set(${out_var} ${_outs} PARENT_SCOPE)
endfunction()
