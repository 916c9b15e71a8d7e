// trainer --version: the commit, build type and compiled CUDA architectures,
// then the CUDA driver and the cuBLAS(Lt), cuDNN, NCCL and CUDA runtime
// versions found at run time. The libraries are opened with dlopen (never
// linked for this) so the report works, with a "not found" line, on a machine
// that lacks some of them.
#include "cmd/version.h"

#include "git_commit.h"  // generated at build time: cmd/git_commit.cmake

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>

#include <cstddef>
#include <initializer_list>
#include <string>

namespace trainer::cmd {
namespace {

#ifdef TRAINER_MPI
constexpr bool kWithMpi = true;
#else
constexpr bool kWithMpi = false;
#endif
#ifdef TRAINER_NCCL
constexpr bool kWithNccl = true;
#else
constexpr bool kWithNccl = false;
#endif

// A shared library opened by the first soname the dynamic loader resolves.
struct Library {
  void* handle = nullptr;
  std::string soname;
  std::string path;  // the file the loader picked, so a wrong LD_LIBRARY_PATH shows
};

Library open_first(std::initializer_list<const char*> sonames) {
  Library lib;
  for (const char* name : sonames) {
    // RTLD_LOCAL: nothing opened here may satisfy symbols of later loads.
    void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    lib.handle = h;
    lib.soname = name;
    link_map* map = nullptr;
    if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) lib.path = map->l_name;
    return lib;
  }
  return lib;
}

std::string names(std::initializer_list<const char*> sonames) {
  std::string s;
  for (const char* n : sonames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

// Versions encoded as major*10000 + minor*100 + patch (cuBLAS, cuDNN 9, NCCL >= 2.9).
std::string decode_10000(long v) {
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

// CUDA driver and runtime: major*1000 + minor*10.
std::string decode_cuda(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

// cuDNN 9 is major*10000 + minor*100 + patch; cuDNN 8 was major*1000 + minor*100 + patch.
std::string decode_cudnn(long v) {
  if (v < 90000) return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
  return decode_10000(v);
}

// NCCL before 2.9 used major*1000 + minor*100 + patch.
std::string decode_nccl(int v) {
  if (v < 20900) return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
  return decode_10000(v);
}

void report(const char* label, std::initializer_list<const char*> sonames, const char* symbol,
            std::string (*query)(void* fn)) {
  const Library lib = open_first(sonames);
  if (!lib.handle) {
    fmt::print("{:<10} not found (tried {}; see LD_LIBRARY_PATH, or source the bundle's env.sh)\n",
               label, names(sonames));
    return;
  }
  void* fn = dlsym(lib.handle, symbol);
  if (!fn) {
    fmt::print("{:<10} found {} but it has no {}\n", label, lib.path, symbol);
    return;
  }
  fmt::print("{:<10} {} ({})\n", label, query(fn), lib.path.empty() ? lib.soname : lib.path);
}

std::string query_int_out(void* fn, std::string (*decode)(int)) {
  int v = 0;
  // cuDriverGetVersion, cudaRuntimeGetVersion and ncclGetVersion all return 0 on success.
  const int status = reinterpret_cast<int (*)(int*)>(fn)(&v);
  if (status != 0) return fmt::format("unknown (version query returned error {})", status);
  return decode(v);
}

}  // namespace

void print_version() {
  fmt::print("trainer {} ({} build)\n", TRAINER_GIT_COMMIT, TRAINER_BUILD_TYPE);
  fmt::print("cuda architectures: {}\n", TRAINER_CUDA_ARCHS);
  fmt::print("built with: nccl {}, mpi {}\n", kWithNccl ? "yes" : "no", kWithMpi ? "yes" : "no");
  fmt::print("libraries found at run time:\n");
  report("driver", {"libcuda.so.1", "libcuda.so"}, "cuDriverGetVersion",
         [](void* fn) { return query_int_out(fn, decode_cuda); });
  report("cudart", {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}, "cudaRuntimeGetVersion",
         [](void* fn) { return query_int_out(fn, decode_cuda); });
  report("cublasLt", {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
         "cublasLtGetVersion", [](void* fn) {
           return decode_10000(static_cast<long>(reinterpret_cast<size_t (*)()>(fn)()));
         });
  report("cublas", {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}, "cublasGetProperty",
         [](void* fn) {
           // cublasGetProperty(libraryPropertyType {MAJOR_VERSION=0, MINOR=1, PATCH=2}, int*).
           auto get = reinterpret_cast<int (*)(int, int*)>(fn);
           int part[3] = {0, 0, 0};
           for (int i = 0; i < 3; ++i) {
             if (get(i, &part[i]) != 0) return std::string("unknown (cublasGetProperty failed)");
           }
           return fmt::format("{}.{}.{}", part[0], part[1], part[2]);
         });
  report("cudnn", {"libcudnn.so.9", "libcudnn.so"}, "cudnnGetVersion", [](void* fn) {
    return decode_cudnn(static_cast<long>(reinterpret_cast<size_t (*)()>(fn)()));
  });
  report("nccl", {"libnccl.so.2", "libnccl.so"}, "ncclGetVersion",
         [](void* fn) { return query_int_out(fn, decode_nccl); });
}

}  // namespace trainer::cmd
