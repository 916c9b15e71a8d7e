// An NVTX injection library (loaded by NVTX from NVTX_INJECTION64_PATH, the
// way Nsight Systems attaches): it records every range the process pushes,
// one name per line, in the file NVTX_PROBE_OUT names. nvtx_ranges.sh runs
// the trainer under it to check where the ranges are placed; NVTX needs no GPU.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

std::mutex mu;
FILE* out = nullptr;

int NVTX_API push(const char* message) {
  std::lock_guard<std::mutex> lock(mu);
  if (out && message) std::fprintf(out, "%s\n", message);
  return 0;
}
int NVTX_API pop() { return 0; }

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const char* path = std::getenv("NVTX_PROBE_OUT");
  if (!path || !(out = std::fopen(path, "w"))) return 0;
  std::setvbuf(out, nullptr, _IOLBF, 0);
  auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
      size <= NVTX_CBID_CORE_RangePop)
    return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}
