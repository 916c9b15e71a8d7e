// The AddressSanitizer emulator build's proof that it catches what a GPU
// faults on or silently corrupts: `cuda_emulator_asan_test CASE` launches one
// kernel whose last thread touches one element past a cudaMalloc block, past
// the launch's dynamic shared memory or past a static __shared__ array, and
// ctest (CMakeLists.txt) expects ASan's report naming the kernel and the
// block's exact size. The misaligned cases read a 16-byte vector 4 bytes off
// its alignment (UndefinedBehaviorSanitizer's alignment check), or a WMMA tile
// 16 bytes off the 32 bytes load_matrix_sync needs, or with a row stride that
// is not a multiple of 16 bytes (mma.h's check). `in-bounds` runs the same
// kernels within bounds and aligned and must exit cleanly, so the reports come
// from the extra element or offset and nothing else.
#include <cstdio>
#include <cstring>
#include <string>

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

namespace {

// 100 floats: not a multiple of 256 bytes, so the driver's rounding (which the
// emulator once copied) would have left the extra element inside the block.
constexpr int kN = 100;

__global__ void store_kernel(float* out, int past) {
  const int i = static_cast<int>(threadIdx.x);
  out[i == kN - 1 ? i + past : i] = 1.0f;
}

__global__ void load_kernel(float* out, const float* in, int past) {
  const int i = static_cast<int>(threadIdx.x);
  out[i] = in[i == kN - 1 ? i + past : i];
}

__global__ void dynamic_shared_kernel(float* out, int past) {
  extern __shared__ float smem[];
  const int i = static_cast<int>(threadIdx.x);
  smem[i] = static_cast<float>(i);
  __syncthreads();
  out[i] = smem[i == kN - 1 ? i + past : i];
}

// A template, as most kernels are: its __shared__ array is COMDAT, which the
// compilers leave without redzones as a static (rewrite_cu.cmake).
template <int N>
__global__ void static_shared_kernel(float* out, int past) {
  __shared__ float tile[N];
  const int i = static_cast<int>(threadIdx.x);
  tile[i] = static_cast<float>(i);
  __syncthreads();
  out[i] = tile[i == N - 1 ? i + past : i];
}

__global__ void vector_load_kernel(float* out, const float* in, int past) {
  const uint4 v = *reinterpret_cast<const uint4*>(in + 4 + past);
  out[0] = __uint_as_float(v.x);
}

// One warp multiplies a 16 x 16 half tile read at `offset` elements with row
// stride `ldm` by itself.
__global__ void wmma_kernel(float* out, const __half* in, int offset, int ldm) {
  namespace wm = nvcuda::wmma;
  wm::fragment<wm::matrix_a, 16, 16, 16, __half, wm::row_major> a;
  wm::fragment<wm::matrix_b, 16, 16, 16, __half, wm::row_major> b;
  wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
  wm::fill_fragment(acc, 0.0f);
  wm::load_matrix_sync(a, in + offset, static_cast<unsigned>(ldm));
  wm::load_matrix_sync(b, in + offset, static_cast<unsigned>(ldm));
  wm::mma_sync(acc, a, b, acc);
  wm::store_matrix_sync(out, acc, 16, wm::mem_row_major);
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string c = argc > 1 ? argv[1] : "";
  const bool all = c == "in-bounds";
  if (!all && c != "write-past-malloc" && c != "read-past-malloc" && c != "read-past-dynamic-shared" &&
      c != "read-past-static-shared" && c != "misaligned-vector" && c != "misaligned-wmma" &&
      c != "wmma-ldm") {
    std::fprintf(stderr,
                 "usage: %s in-bounds | write-past-malloc | read-past-malloc | "
                 "read-past-dynamic-shared | read-past-static-shared | misaligned-vector | "
                 "misaligned-wmma | wmma-ldm\n",
                 argv[0]);
    return 2;
  }
  const int past = all ? 0 : 1;
  float *a = nullptr, *b = nullptr;
  if (!check(cudaMalloc(reinterpret_cast<void**>(&a), kN * sizeof(float)), "cudaMalloc") ||
      !check(cudaMalloc(reinterpret_cast<void**>(&b), kN * sizeof(float)), "cudaMalloc") ||
      !check(cudaMemset(a, 0, kN * sizeof(float)), "cudaMemset"))
    return 1;
  if (all || c == "write-past-malloc") store_kernel<<<1, kN>>>(a, past);
  if (all || c == "read-past-malloc") load_kernel<<<1, kN>>>(b, a, past);
  if (all || c == "read-past-dynamic-shared")
    dynamic_shared_kernel<<<1, kN, kN * sizeof(float)>>>(b, past);
  if (all || c == "read-past-static-shared") static_shared_kernel<kN><<<1, kN>>>(b, past);
  if (all || c == "misaligned-vector") vector_load_kernel<<<1, 1>>>(b, a, past);
  if (all || c == "misaligned-wmma" || c == "wmma-ldm") {
    // 40 rows of 40 halves; a 16 x 16 tile at element 8 is 16 bytes off.
    __half* h = nullptr;
    float* tile = nullptr;
    if (!check(cudaMalloc(reinterpret_cast<void**>(&h), 40 * 40 * sizeof(__half)), "cudaMalloc") ||
        !check(cudaMemset(h, 0, 40 * 40 * sizeof(__half)), "cudaMemset") ||
        !check(cudaMalloc(reinterpret_cast<void**>(&tile), 256 * sizeof(float)), "cudaMalloc"))
      return 1;
    wmma_kernel<<<1, 32>>>(tile, h, c == "misaligned-wmma" ? 8 : 0, c == "wmma-ldm" ? 20 : 16);
    if (!check(cudaDeviceSynchronize(), "sync")) return 1;
    cudaFree(h);
    cudaFree(tile);
  }
  if (!check(cudaGetLastError(), "launch") || !check(cudaDeviceSynchronize(), "sync")) return 1;
  float host[kN];
  if (!check(cudaMemcpy(host, b, sizeof host, cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
  cudaFree(a);
  cudaFree(b);
  std::printf("%s: no access out of bounds (last element %g)\n", c.c_str(), host[kN - 1]);
  return 0;
}
