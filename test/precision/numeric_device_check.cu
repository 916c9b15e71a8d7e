// [cuda] kernels/numeric.h compiled for the device against the GPU's own conversions,
// for every fp32 bit pattern (encoders) and every code (decoders):
//   f32_to_e4m3/e5m2 vs __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) (cvt.rn.satfinite on sm_90),
//   f32_to_f16 vs __float2half_rn, f32_to_bf16 vs __float2bfloat16_rn,
//   decoders vs __half2float / __bfloat162float / __nv_cvt_fp8_to_halfraw.
// A standalone program for ctest: exit 0 all equal, 1 a mismatch or CUDA error,
// 77 (skipped) without a GPU. About a second on an H200.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/numeric.h"

namespace {

constexpr int kNumChecks = 8;
const char* const kCheckNames[kNumChecks] = {"f32_to_e4m3", "f32_to_e5m2", "f32_to_f16",
                                             "f32_to_bf16", "f16_to_f32",  "bf16_to_f32",
                                             "e4m3_to_f32", "e5m2_to_f32"};

struct Counts {
  unsigned long long mismatches[kNumChecks];
  unsigned int first[kNumChecks];  // smallest mismatching input (bits or code)
};

__device__ bool same_float(float a, float b) {
  return __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b);
}

__device__ void report(Counts* c, int check, unsigned int input) {
  atomicAdd(&c->mismatches[check], 1ull);
  atomicMin(&c->first[check], input);
}

__global__ void check_all(unsigned long long base, Counts* counts) {
  const unsigned long long idx = base + blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  const unsigned int u = static_cast<unsigned int>(idx);
  const float x = trainer::f32_from_bits(u);
  if (trainer::f32_to_e4m3(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)) report(counts, 0, u);
  if (trainer::f32_to_e5m2(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)) report(counts, 1, u);
  if (trainer::f32_to_f16(x) != __half_as_ushort(__float2half_rn(x))) report(counts, 2, u);
  if (trainer::f32_to_bf16(x) != __bfloat16_as_ushort(__float2bfloat16_rn(x))) report(counts, 3, u);
  if (idx < 65536u) {
    const unsigned short h = static_cast<unsigned short>(u);
    if (!same_float(trainer::f16_to_f32(h), __half2float(__ushort_as_half(h)))) report(counts, 4, u);
    if (!same_float(trainer::bf16_to_f32(h), __bfloat162float(__ushort_as_bfloat16(h)))) report(counts, 5, u);
  }
  if (idx < 256u) {
    const __nv_fp8_storage_t c = static_cast<__nv_fp8_storage_t>(u);
    const float e4 = __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3)));
    const float e5 = __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E5M2)));
    if (!same_float(trainer::e4m3_to_f32(c), e4)) report(counts, 6, u);
    if (!same_float(trainer::e5m2_to_f32(c), e5)) report(counts, 7, u);
  }
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("FAILED: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA GPU visible\n");
    return 77;
  }
  Counts init{};
  for (unsigned int& f : init.first) f = 0xFFFFFFFFu;
  Counts* counts = nullptr;
  if (!ok(cudaMalloc(&counts, sizeof(Counts)), "cudaMalloc") ||
      !ok(cudaMemcpy(counts, &init, sizeof(Counts), cudaMemcpyHostToDevice), "upload"))
    return 1;
  constexpr unsigned long long kPerLaunch = 1ull << 30;
  constexpr unsigned int kBlock = 256;
  for (unsigned long long base = 0; base < (1ull << 32); base += kPerLaunch) {
    check_all<<<static_cast<unsigned int>(kPerLaunch / kBlock), kBlock>>>(base, counts);
    if (!ok(cudaGetLastError(), "launch")) return 1;
  }
  Counts result{};
  if (!ok(cudaMemcpy(&result, counts, sizeof(Counts), cudaMemcpyDeviceToHost), "download")) return 1;
  cudaFree(counts);
  int failed = 0;
  for (int i = 0; i < kNumChecks; ++i) {
    std::printf("%-12s %llu mismatches", kCheckNames[i], result.mismatches[i]);
    if (result.mismatches[i]) std::printf(" (first input 0x%08x)", result.first[i]);
    std::printf("\n");
    failed += result.mismatches[i] != 0;
  }
  std::printf(failed ? "FAILED\n" : "PASSED: numeric.h equals the device conversions on every input\n");
  return failed ? 1 : 0;
}
