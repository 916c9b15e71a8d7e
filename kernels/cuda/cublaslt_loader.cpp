// cuBLASLt, opened on the first GEMM rather than linked.
//
// Why: libcublasLt is ~500 MB with ~370k relocations; linking it costs every
// process 0.35 s of start-up (measured: an empty main() linked against it) even
// when the job runs on CPU ranks, never touches a GPU, or only prints --help.
// Each test entry and each mpirun rank paid it. These definitions carry the
// API's names, so call sites stay plain cuBLASLt calls; the first one opens the
// library (the loader's search path, then the folder libcudart came from) and
// every later one is one indirect call. A node without cuBLASLt now fails at
// the first GEMM with one line naming the library, instead of not starting.
//
// Not built for the host emulator, whose own cuBLASLt (test/cuda_emu/cublaslt.cpp)
// defines these names.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

#include "kernels/error.h"

namespace {

#define TRAINER_STR2(x) #x
#define TRAINER_STR(x) TRAINER_STR2(x)
constexpr const char* kSoname = "libcublasLt.so." TRAINER_STR(CUBLAS_VER_MAJOR);

void* open_library() {
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  std::string first = dlerror();
  // The toolkit keeps cuBLASLt beside cudart, which the executable links.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &info) && info.dli_fname) {
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    if (void* h = dlopen((dir + kSoname).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  }
  throw trainer::Error(fmt::format(
      "cannot load {} (the CUDA backend's GEMMs): {}; put the CUDA toolkit's lib folder on "
      "LD_LIBRARY_PATH (a bundle's env.sh does)",
      kSoname, first));
}

// Every symbol at once, so a library missing one fails on the first call, not mid-run.
struct Api {
  void* handle = open_library();
#define TRAINER_CUBLASLT_FN(name) decltype(&::name) name = resolve<decltype(&::name)>(#name);
  template <typename F>
  F resolve(const char* name) {
    void* p = dlsym(handle, name);
    if (!p)
      throw trainer::Error(fmt::format("{} has no symbol {}: built against cuBLASLt {}", kSoname,
                                       name, TRAINER_STR(CUBLAS_VER_MAJOR)));
    return reinterpret_cast<F>(p);
  }
  TRAINER_CUBLASLT_FN(cublasLtCreate)
  TRAINER_CUBLASLT_FN(cublasLtDestroy)
  TRAINER_CUBLASLT_FN(cublasLtGetStatusString)
  TRAINER_CUBLASLT_FN(cublasLtGetVersion)
  TRAINER_CUBLASLT_FN(cublasLtMatmul)
  TRAINER_CUBLASLT_FN(cublasLtMatmulAlgoGetHeuristic)
  TRAINER_CUBLASLT_FN(cublasLtMatmulDescCreate)
  TRAINER_CUBLASLT_FN(cublasLtMatmulDescDestroy)
  TRAINER_CUBLASLT_FN(cublasLtMatmulDescSetAttribute)
  TRAINER_CUBLASLT_FN(cublasLtMatmulPreferenceCreate)
  TRAINER_CUBLASLT_FN(cublasLtMatmulPreferenceDestroy)
  TRAINER_CUBLASLT_FN(cublasLtMatmulPreferenceSetAttribute)
  TRAINER_CUBLASLT_FN(cublasLtMatrixLayoutCreate)
  TRAINER_CUBLASLT_FN(cublasLtMatrixLayoutDestroy)
  TRAINER_CUBLASLT_FN(cublasLtMatrixLayoutSetAttribute)
#undef TRAINER_CUBLASLT_FN
};

// A failed open throws out of the static's initialisation; the next call tries again.
const Api& api() {
  static const Api instance;
  return instance;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { return api().cublasLtCreate(handle); }

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { return api().cublasLtDestroy(handle); }

// Reached from CUBLAS_CHECK on a failure, which only happens once the library is open.
const char* cublasLtGetStatusString(cublasStatus_t status) {
  return api().cublasLtGetStatusString(status);
}

size_t cublasLtGetVersion() { return api().cublasLtGetVersion(); }

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* a, cublasLtMatrixLayout_t a_desc,
                              const void* b, cublasLtMatrixLayout_t b_desc, const void* beta,
                              const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return api().cublasLtMatmul(handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d,
                              d_desc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a_desc,
                                              cublasLtMatrixLayout_t b_desc,
                                              cublasLtMatrixLayout_t c_desc,
                                              cublasLtMatrixLayout_t d_desc,
                                              cublasLtMatmulPreference_t preference,
                                              int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  return api().cublasLtMatmulAlgoGetHeuristic(handle, desc, a_desc, b_desc, c_desc, d_desc,
                                              preference, requested, results, returned);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  return api().cublasLtMatmulDescCreate(desc, compute, scale);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return api().cublasLtMatmulDescDestroy(desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  return api().cublasLtMatmulDescSetAttribute(desc, attr, buf, bytes);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return api().cublasLtMatmulPreferenceCreate(pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return api().cublasLtMatmulPreferenceDestroy(pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  return api().cublasLtMatmulPreferenceSetAttribute(pref, attr, buf, bytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  return api().cublasLtMatrixLayoutCreate(layout, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return api().cublasLtMatrixLayoutDestroy(layout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  return api().cublasLtMatrixLayoutSetAttribute(layout, attr, buf, bytes);
}

}  // extern "C"
