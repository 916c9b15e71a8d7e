# cmake -DIN=x.cu -DOUT=x.cu.cpp -P rewrite_cu.cmake: a CUDA source the host
# compiler can build against the emulator (include/cuda_runtime.h). Only the
# two pieces of CUDA syntax C++ cannot express change, each on its own line so
# diagnostics and __LINE__ still point into the original file (#line):
#   kernel<<<grid, block, smem, stream>>>(args)
#     -> kernel * ::cuda_emu::LaunchConfig(__FILE__, __LINE__, grid, block, smem, stream)
#        % ::cuda_emu::args(args)
#   extern __shared__ [__align__(N)] T name[];
#     -> T* name = reinterpret_cast<T*>(::cuda_emu::dynamic_shared());
#   __shared__ T name[N];
#     -> static T name[N]; ::cuda_emu::shared_memory(&name, sizeof(name));
file(READ "${IN}" text)
string(REPLACE "<<<" " * ::cuda_emu::LaunchConfig(__FILE__, __LINE__, " text "${text}")
string(REPLACE ">>>" ") % ::cuda_emu::args" text "${text}")
string(REGEX REPLACE
  "extern __shared__ (__align__\\([0-9]+\\) )?((unsigned )?[A-Za-z_][A-Za-z0-9_:]*) ([A-Za-z_][A-Za-z0-9_]*)\\[\\];"
  "\\2* \\4 = reinterpret_cast<\\2*>(::cuda_emu::dynamic_shared());" text "${text}")
# Static shared memory: a function-local static (one block runs at a time),
# poisoned by its first thread in each block as dynamic shared memory is.
string(REGEX REPLACE
  "__shared__ ([^;={}]*[^;={} ]) ([A-Za-z_][A-Za-z0-9_]*)((\\[[^;]*\\])*);"
  "static \\1 \\2\\3; ::cuda_emu::shared_memory(&\\2, sizeof(\\2));" text "${text}")
if(text MATCHES "extern __shared__")
  message(FATAL_ERROR "${IN}: an `extern __shared__` declaration the emulator's rewrite does not know")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
