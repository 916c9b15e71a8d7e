// cuBLASLt is not linked but opened by the first call (kernels/cuda/cublaslt_loader.cpp):
// a CPU-only run never pays its start-up, and the forwarding names must resolve.
#include <cublasLt.h>
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <string>

namespace {
bool loaded() {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}
}  // namespace

TEST_CASE("cuBLASLt is opened by its first call, not at start-up", "[cublaslt]") {
  REQUIRE_FALSE(loaded());
  // Needs no GPU: the status descriptions live in the library (their wording is its own).
  const std::string text = cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(text.find("not supported") != std::string::npos);
  CHECK(loaded());
}
