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
#     -> T (&name)[N] = ::cuda_emu::static_shared<T[N]>([] {});
file(READ "${IN}" text)
string(REPLACE "<<<" " * ::cuda_emu::LaunchConfig(__FILE__, __LINE__, " text "${text}")
string(REPLACE ">>>" ") % ::cuda_emu::args" text "${text}")
string(REGEX REPLACE
  "extern __shared__ (__align__\\([0-9]+\\) )?((unsigned )?[A-Za-z_][A-Za-z0-9_:]*) ([A-Za-z_][A-Za-z0-9_]*)\\[\\];"
  "\\2* \\4 = reinterpret_cast<\\2*>(::cuda_emu::dynamic_shared());" text "${text}")
# Static shared memory: a reference to a heap block of exactly its size, made
# (NaN bytes) by the block's first thread to reach it and freed when the block
# ends. Not a function-local static: the compilers do not pad statics of
# templates and inline functions (COMDAT) with AddressSanitizer redzones, and
# most kernels are templates. The lambda's type names the declaration (and the
# template instance it is in); blocks are 256-byte aligned, above any __align__.
string(REGEX REPLACE
  "__shared__ (__align__\\([0-9]+\\) )?([^;={}]*[^;={} ]) ([A-Za-z_][A-Za-z0-9_]*)((\\[[^;]*\\])*);"
  "\\2 (&\\3)\\4 = ::cuda_emu::static_shared<\\2\\4>([] {});" text "${text}")
if(text MATCHES "extern __shared__")
  message(FATAL_ERROR "${IN}: an `extern __shared__` declaration the emulator's rewrite does not know")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
