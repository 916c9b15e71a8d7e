// The emulator's own tests (CUDA source: built through rewrite_cu.cmake as the
// backend is): that it runs correct kernels as a GPU would and
// that each GPU failure it claims to catch is caught. A kernel that would hang
// or misbehave on a GPU runs in a forked child, which must abort with the
// emulator's message.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include <thread>
#include <atomic>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

// Runs f in a child process; returns its stderr, and whether it aborted.
std::pair<bool, std::string> run_child(const std::function<void()>& f) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);  // not Catch2's handler: the parent judges the abort
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(fds[1], 2);
    close(fds[0]);
    f();
    std::_Exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, err};
}

template <class T>
T* device_array(size_t n) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  return static_cast<T*>(p);
}

void warp_sum_kernel(const float* in, float* out) {
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) out[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = v;
}

// Reverses a block's values through shared memory; `fenced` false drops the
// barrier between the writes and the reads.
void reverse_kernel(const int* in, int* out, bool fenced) {
  __shared__ int tile[256];
  tile[threadIdx.x] = in[threadIdx.x];
  if (fenced) __syncthreads();
  out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

void split_barrier_kernel() {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    (void)__shfl_xor_sync(0xffffffffu, 1, 1);
}

void exited_lane_kernel() {
  if (threadIdx.x == 5) return;
  (void)__shfl_down_sync(0xffffffffu, 1.0f, 1);
}

__global__ void dynamic_smem_kernel(int* out) {
  extern __shared__ int buf[];
  buf[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = buf[blockDim.x - 1];
}

void scan_kernel(const int* in, int* out, int* total) {
  using Scan = cub::BlockScan<int, 128>;
  __shared__ typename Scan::TempStorage temp;
  int items[2] = {in[2 * threadIdx.x], in[2 * threadIdx.x + 1]}, sums[2], all;
  Scan(temp).ExclusiveSum(items, sums, all);
  out[2 * threadIdx.x] = sums[0];
  out[2 * threadIdx.x + 1] = sums[1];
  if (threadIdx.x == 0) *total = all;
}

}  // namespace

TEST_CASE("warp shuffles reduce as on a GPU", "[emulator]") {
  const int blocks = 3, threads = 128;
  float* in = device_array<float>(blocks * threads);
  float* out = device_array<float>(blocks * threads / 32);
  for (int i = 0; i < blocks * threads; ++i) in[i] = static_cast<float>(i % 7);
  warp_sum_kernel<<<blocks, threads>>>(in, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int w = 0; w < blocks * threads / 32; ++w) {
    float expect = 0;
    for (int l = 0; l < 32; ++l) expect += static_cast<float>((w * 32 + l) % 7);
    CHECK(out[w] == expect);
  }
  cudaFree(in);
  cudaFree(out);
}

TEST_CASE("a missing __syncthreads reads unwritten shared memory", "[emulator]") {
  int* in = device_array<int>(256);
  int* out = device_array<int>(256);
  for (int i = 0; i < 256; ++i) in[i] = i;
  for (int run = 0; run < 2; ++run) {  // both thread orders
    reverse_kernel<<<1, 256>>>(in, out, true);
    for (int i = 0; i < 256; ++i) REQUIRE(out[i] == 255 - i);
  }
  int wrong = 0;
  for (int run = 0; run < 2; ++run) {
    reverse_kernel<<<1, 256>>>(in, out, false);
    for (int i = 0; i < 256; ++i) wrong += out[i] != 255 - i;
  }
  CHECK(wrong > 0);
  cudaFree(in);
  cudaFree(out);
}

TEST_CASE("a barrier only some threads reach is reported as a hang", "[emulator]") {
  auto [aborted, err] = run_child([] {
    split_barrier_kernel<<<1, 32>>>();
  });
  CHECK(aborted);
  CHECK_THAT(err, Catch::Contains("deadlock"));
  CHECK_THAT(err, Catch::Contains("emulator_test.cu:"));
}

TEST_CASE("a full-mask shuffle after a lane exited is reported", "[emulator]") {
  auto [aborted, err] = run_child([] {
    exited_lane_kernel<<<1, 32>>>();
  });
  CHECK(aborted);
  CHECK_THAT(err, Catch::Contains("exited"));
}

TEST_CASE("launches the driver refuses are refused", "[emulator]") {
  int* out = device_array<int>(1);
  warp_sum_kernel<<<1, 2048>>>(nullptr, nullptr);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);  // not sticky
  warp_sum_kernel<<<dim3(1, 70000), 32>>>(nullptr, nullptr);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  // Dynamic shared memory above 48 KiB needs the kernel's opt-in.
  dynamic_smem_kernel<<<1, 64, 64 * 1024>>>(out);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               64 * 1024) == cudaSuccess);
  dynamic_smem_kernel<<<1, 64, 64 * 1024>>>(out);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(out[0] == 63);
  CHECK(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             228 * 1024) == cudaErrorInvalidValue);
  cudaStream_t s;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  dynamic_smem_kernel<<<1, 64, 0, s>>>(out);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  cudaFree(out);
}

TEST_CASE("device memory starts as NaN and copies check their direction", "[emulator]") {
  float* d = device_array<float>(4);
  CHECK(std::isnan(d[0]));
  float h[4] = {1, 2, 3, 4};
  CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d, h, 2 * sizeof h, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // overruns
  CHECK(cudaFree(h) == cudaErrorInvalidValue);
  cudaGetLastError();
  cudaFree(d);
}

namespace {
__global__ void order_fill_kernel(float* p, int n, float v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
__global__ void order_copy_kernel(float* dst, const float* src, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}
}  // namespace

// Two non-blocking streams and an event between them, for the stream-order cases.
struct TwoStreams {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  cudaEvent_t e = nullptr;
  TwoStreams() {
    REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  }
  ~TwoStreams() {
    cudaEventDestroy(e);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
  }
};

// What the emulator's streams promise (streams.cpp): queued work runs as late
// as a GPU may run it, so an order a program forgot is seen as stale bytes.
TEST_CASE("streams run queued work when waited for, in event order", "[emulator]") {
  const int n = 64;
  float* a = device_array<float>(n);
  float* b = device_array<float>(n);
  TwoStreams two;
  auto [s1, s2, e] = two;

  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 1.0f);
  CHECK(std::isnan(a[0]));  // queued, not run
  // s2 reads `a` without waiting for s1: it sees the NaN filling.
  order_copy_kernel<<<1, n, 0, s2>>>(b, a, n);
  REQUIRE(cudaStreamSynchronize(s2) == cudaSuccess);
  CHECK(std::isnan(b[0]));
  CHECK(std::isnan(a[0]));
  // With an event between them, s2's copy runs after s1's fill.
  REQUIRE(cudaEventRecord(e, s1) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s2, e, 0) == cudaSuccess);
  order_copy_kernel<<<1, n, 0, s2>>>(b, a, n);
  REQUIRE(cudaStreamSynchronize(s2) == cudaSuccess);
  CHECK(b[0] == 1.0f);
  CHECK(b[n - 1] == 1.0f);

  // A wait keeps the record the event held when it was queued.
  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 2.0f);
  REQUIRE(cudaEventRecord(e, s1) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s2, e, 0) == cudaSuccess);
  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 3.0f);
  REQUIRE(cudaEventRecord(e, s1) == cudaSuccess);
  order_copy_kernel<<<1, n, 0, s2>>>(b, a, n);
  REQUIRE(cudaStreamSynchronize(s2) == cudaSuccess);
  CHECK(b[0] == 2.0f);
  REQUIRE(cudaEventSynchronize(e) == cudaSuccess);
  CHECK(a[0] == 3.0f);

  // Timing needs both events complete; a query completes what it asks about.
  cudaEvent_t t0, t1;
  REQUIRE(cudaEventCreate(&t0) == cudaSuccess);
  REQUIRE(cudaEventCreate(&t1) == cudaSuccess);
  REQUIRE(cudaEventRecord(t0, s1) == cudaSuccess);
  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 4.0f);
  REQUIRE(cudaEventRecord(t1, s1) == cudaSuccess);
  float ms = -1.0f;
  CHECK(cudaEventElapsedTime(&ms, t0, t1) == cudaErrorNotReady);
  cudaGetLastError();
  CHECK(cudaEventQuery(t1) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess);
  CHECK(ms >= 0.0f);
  CHECK(a[0] == 4.0f);

  // Copies to page-locked memory land in stream order; to pageable memory,
  // before the call returns; a pageable source is read when the copy is queued.
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4 * sizeof(float)) == cudaSuccess);
  pinned[0] = 0.0f;
  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 5.0f);
  REQUIRE(cudaMemcpyAsync(pinned, a, 4 * sizeof(float), cudaMemcpyDeviceToHost, s1) == cudaSuccess);
  CHECK(pinned[0] == 0.0f);
  REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);
  CHECK(pinned[0] == 5.0f);
  float host[4] = {0, 0, 0, 0};
  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 6.0f);
  REQUIRE(cudaMemcpyAsync(host, a, sizeof host, cudaMemcpyDeviceToHost, s1) == cudaSuccess);
  CHECK(host[0] == 6.0f);
  host[0] = 7.0f;
  REQUIRE(cudaMemcpyAsync(b, host, sizeof host, cudaMemcpyHostToDevice, s1) == cudaSuccess);
  host[0] = 8.0f;
  REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);
  CHECK(b[0] == 7.0f);

  // The legacy stream waits for blocking streams' work, not for non-blocking ones'.
  cudaStream_t blocking;
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
  order_fill_kernel<<<1, n, 0, blocking>>>(a, n, 9.0f);
  float h = 0.0f;
  REQUIRE(cudaMemcpy(&h, a, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h == 9.0f);
  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 10.0f);
  REQUIRE(cudaMemcpy(&h, a, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h == 9.0f);
  // cudaFree synchronizes the device first.
  REQUIRE(cudaFree(b) == cudaSuccess);
  CHECK(a[0] == 10.0f);

  for (cudaEvent_t ev : {t0, t1}) cudaEventDestroy(ev);
  cudaStreamDestroy(blocking);
  cudaFreeHost(pinned);
  cudaFree(a);
}

// The emulated NCCL's landing is such a poll: it cannot run before every
// rank has joined, and a stuck one must leave queries answering and another
// thread free to look (the watchdog), not hang the process inside a lock.
TEST_CASE("a poll that is not ready holds its stream; a synchronize lets other threads query",
          "[emulator]") {
  const int n = 16;
  float* a = device_array<float>(n);
  float* b = device_array<float>(n);
  TwoStreams two;
  auto [s1, s2, e] = two;
  std::atomic<bool> ready{false};
  std::atomic<int> polls{0};
  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 1.0f);
  cuda_emu::enqueue_poll(s1, [&] {
    ++polls;
    return ready.load();
  });
  order_fill_kernel<<<1, n, 0, s1>>>(a, n, 2.0f);
  REQUIRE(cudaEventRecord(e, s1) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s2, e, 0) == cudaSuccess);
  order_copy_kernel<<<1, n, 0, s2>>>(b, a, n);

  CHECK(cudaStreamQuery(s1) == cudaErrorNotReady);
  CHECK(a[0] == 1.0f);  // the work before the poll ran, the work after it did not
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  CHECK(cudaStreamQuery(s2) == cudaErrorNotReady);  // waits on s1 through the event
  CHECK(std::isnan(b[0]));
  CHECK(polls.load() >= 2);

  // The host waits on s2; another thread queries s1 meanwhile (the lock is
  // free between polls) and then lets the poll succeed.
  std::atomic<int> queried{0};
  std::thread other([&] {
    for (int i = 0; i < 20; ++i)
      if (cudaStreamQuery(s1) == cudaErrorNotReady) ++queried;
    ready = true;
  });
  REQUIRE(cudaStreamSynchronize(s2) == cudaSuccess);
  other.join();
  CHECK(queried.load() == 20);
  CHECK(b[0] == 2.0f);
  CHECK(cudaStreamQuery(s1) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaSuccess);

  cudaFree(a);
  cudaFree(b);
}

TEST_CASE("cub's block scan and radix sort as cub defines them", "[emulator]") {
  int* in = device_array<int>(256);
  int* out = device_array<int>(256);
  int* total = device_array<int>(1);
  for (int i = 0; i < 256; ++i) in[i] = i % 5;
  scan_kernel<<<1, 128>>>(in, out, total);
  int run = 0;
  for (int i = 0; i < 256; ++i) {
    CHECK(out[i] == run);
    run += i % 5;
  }
  CHECK(*total == run);

  // Stable on the low 3 bits, signed keys in two's-complement order.
  const int n = 6;
  int32_t keys[n] = {5, -3, 13, 5, 2, 21}, vals[n] = {0, 1, 2, 3, 4, 5};
  int32_t *dk = device_array<int32_t>(n), *dv = device_array<int32_t>(n);
  int32_t *sk = device_array<int32_t>(n), *sv = device_array<int32_t>(n);
  std::memcpy(dk, keys, sizeof keys);
  std::memcpy(dv, vals, sizeof vals);
  size_t bytes = 0;
  REQUIRE(cub::DeviceRadixSort::SortPairs(nullptr, bytes, dk, sk, dv, sv, n, 0, 3) == cudaSuccess);
  void* temp = device_array<unsigned char>(bytes);
  REQUIRE(cub::DeviceRadixSort::SortPairs(temp, bytes, dk, sk, dv, sv, n, 0, 3) == cudaSuccess);
  // low 3 bits: 5->5, -3->5, 13->5, 5->5, 2->2, 21->5
  const int32_t expect_vals[n] = {4, 0, 1, 2, 3, 5};
  for (int i = 0; i < n; ++i) CHECK(sv[i] == expect_vals[i]);
  REQUIRE(cub::DeviceRadixSort::SortPairs(temp, bytes, dk, sk, dv, sv, n) == cudaSuccess);
  const int32_t expect_keys[n] = {-3, 2, 5, 5, 13, 21};
  for (int i = 0; i < n; ++i) CHECK(sk[i] == expect_keys[i]);
  for (void* p : {(void*)in, (void*)out, (void*)total, (void*)dk, (void*)dv, (void*)sk, (void*)sv, temp})
    cudaFree(p);
}

namespace {
struct Lt {
  cublasLtHandle_t h;
  Lt() { REQUIRE(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~Lt() { cublasLtDestroy(h); }
  // The heuristic's algorithm for operands aligned only to their 4-byte
  // elements (odd leading dimensions).
  cublasLtMatmulAlgo_t element_aligned_algo(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                            cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld) {
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    const uint32_t align = 4;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &res, &got) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(got == 1);
    cublasLtMatmulPreferenceDestroy(pref);
    return res.algo;
  }
};

// D = op(A) op(B) (+ bias) in cuBLASLt's column-major terms on small matrices.
// On `stream` (non-blocking) the matmul is queued: D is untouched until the
// stream is synchronized, after the descriptors were destroyed.
void check_matmul(bool ta, bool tb, int m, int n, int k, uint32_t epilogue,
                  cudaStream_t stream = nullptr) {
  Lt lt;
  const int lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldd = m + 3;
  float* A = device_array<float>(static_cast<size_t>(lda) * (ta ? m : k));
  float* B = device_array<float>(static_cast<size_t>(ldb) * (tb ? k : n));
  float* D = device_array<float>(static_cast<size_t>(ldd) * n);
  float* bias = device_array<float>(std::max(m, n));
  const int64_t aux_ld = (m + 7) / 8 * 8 + 8;  // a multiple of 8, as cuBLASLt requires
  float* aux = device_array<float>(static_cast<size_t>(aux_ld) * n);
  const bool gelu_fwd = epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool dgelu = epilogue == CUBLASLT_EPILOGUE_DGELU;
  auto a = [&](int i, int p) -> float& { return ta ? A[p + i * lda] : A[i + p * lda]; };
  auto b = [&](int p, int j) -> float& { return tb ? B[j + p * ldb] : B[p + j * ldb]; };
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) a(i, p) = static_cast<float>((i * 3 + p) % 5 - 2);
  for (int p = 0; p < k; ++p)
    for (int j = 0; j < n; ++j) b(p, j) = static_cast<float>((p + 2 * j) % 4 - 1);
  for (int i = 0; i < m; ++i) bias[i] = static_cast<float>(i);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) aux[i + j * aux_ld] = 0.25f * static_cast<float>((i + 3 * j) % 9 - 4);
  cublasLtMatmulDesc_t desc;
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  if (gelu_fwd || dgelu) {
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  }
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? k : m, ta ? m : k, lda);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? n : k, tb ? k : n, ldb);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd);
  const cublasLtMatmulAlgo_t algo = lt.element_aligned_algo(desc, la, lb, ld);  // odd leading dims
  const float alpha = 1.0f, beta = 0.0f;  // D starts as NaN: beta 0 must not read it
  REQUIRE(cublasLtMatmul(lt.h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &algo, nullptr,
                         0, stream) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  if (stream) {
    CHECK(std::isnan(D[0]));
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      const bool biased = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      float s = biased ? static_cast<float>(i) : 0.0f;
      for (int p = 0; p < k; ++p) s += a(i, p) * b(p, j);
      const double c = 0.7978845608028654;  // sqrt(2/pi)
      if (gelu_fwd) {
        REQUIRE(aux[i + j * aux_ld] == s);
        const double x = s, gelu = 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
        REQUIRE(D[i + j * ldd] == Approx(gelu).margin(1e-6));
      } else if (dgelu) {
        const double x = aux[i + j * aux_ld], t = std::tanh(c * (x + 0.044715 * x * x * x));
        const double grad = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
        REQUIRE(D[i + j * ldd] == Approx(s * grad).margin(1e-6));
      } else {
        REQUIRE(D[i + j * ldd] == s);
      }
    }
  if (epilogue == CUBLASLT_EPILOGUE_BGRADB)
    for (int j = 0; j < n; ++j) {
      float s = 0;
      for (int p = 0; p < k; ++p) s += b(p, j);
      CHECK(bias[j] == s);
    }
  for (void* p : {(void*)A, (void*)B, (void*)D, (void*)bias, (void*)aux}) cudaFree(p);
}
}  // namespace

TEST_CASE("cuBLASLt's column-major matmul, transposes and epilogues", "[emulator]") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_matmul(ta, tb, 5, 3, 4, CUBLASLT_EPILOGUE_DEFAULT);
      check_matmul(ta, tb, 2, 7, 3, CUBLASLT_EPILOGUE_BIAS);
      check_matmul(ta, tb, 4, 6, 5, CUBLASLT_EPILOGUE_BGRADB);
      check_matmul(ta, tb, 9, 4, 3, CUBLASLT_EPILOGUE_GELU_AUX);
      check_matmul(ta, tb, 3, 5, 6, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
      check_matmul(ta, tb, 6, 3, 4, CUBLASLT_EPILOGUE_DGELU);
    }
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  check_matmul(false, true, 5, 3, 4, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, s);
  cudaStreamDestroy(s);
}

// The emulator's promise (cublaslt.cpp): each output is the double sum of its
// products rounded once, whatever blocks it computes in. Random values, where
// an fp32 sum gives other bits; m and n not multiples of the blocks, both
// transposes of B.
TEST_CASE("cuBLASLt sums each output in double and rounds once", "[emulator]") {
  Lt lt;
  const int m = 37, n = 11, k = 300;
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) / 3e6f;
  };
  for (bool tb : {false, true}) {
    float* A = device_array<float>(static_cast<size_t>(m) * k);
    float* B = device_array<float>(static_cast<size_t>(k) * n);
    float* D = device_array<float>(static_cast<size_t>(m) * n);
    for (int i = 0; i < m * k; ++i) A[i] = next();
    for (int i = 0; i < k * n; ++i) B[i] = next();
    cublasLtMatmulDesc_t desc;
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    const int32_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? n : k, tb ? k : n, tb ? n : k);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
    const cublasLtMatmulAlgo_t algo = lt.element_aligned_algo(desc, la, lb, ld);
    const float alpha = 1.0f, beta = 0.0f;
    REQUIRE(cublasLtMatmul(lt.h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &algo, nullptr,
                           0, nullptr) == CUBLAS_STATUS_SUCCESS);
    int float_order_differs = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double s = 0.0;
        float f = 0.0f;
        for (int p = 0; p < k; ++p) {
          const float bv = tb ? B[j + p * n] : B[p + j * k];
          s += static_cast<double>(A[i + p * m]) * bv;
          f += A[i + p * m] * bv;
        }
        REQUIRE(D[i + j * m] == static_cast<float>(s));
        float_order_differs += D[i + j * m] != f;
      }
    CHECK(float_order_differs > 0);  // an fp32 sum would have been told apart
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    for (void* p : {(void*)A, (void*)B, (void*)D}) cudaFree(p);
  }
}

TEST_CASE("cuBLASLt refuses FP8 layouts Hopper refuses", "[emulator]") {
  Lt lt;
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, 16, 16, 16);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, 16, 16, 16);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 16, 16, 16);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulHeuristicResult_t res;
  int got = 0;
  CHECK(cublasLtMatmulAlgoGetHeuristic(lt.h, desc, la, lb, ld, ld, pref, 1, &res, &got) ==
        CUBLAS_STATUS_NOT_SUPPORTED);  // NN
  int32_t t = CUBLAS_OP_T;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  CHECK(cublasLtMatmulAlgoGetHeuristic(lt.h, desc, la, lb, ld, ld, pref, 1, &res, &got) ==
        CUBLAS_STATUS_SUCCESS);  // TN
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(desc);
}

TEST_CASE("bf16 conversion rounds to nearest even", "[emulator]") {
  CHECK(__float2bfloat16_rn(1.0f + 1.0f / 256).__x == 0x3f80);  // tie to even
  CHECK(__float2bfloat16_rn(1.0f + 3.0f / 256).__x == 0x3f82);
  CHECK(__float2bfloat16_rn(NAN).__x == 0x7fff);
  CHECK(__bfloat162float(__ushort_as_bfloat16(0x4049)) == 3.140625f);
}

TEST_CASE("fp16 conversions equal IEEE binary16 on every code and a float sweep", "[emulator]") {
  int bad = 0;
  for (uint32_t code = 0; code < 65536; ++code) {
    const auto c = static_cast<uint16_t>(code);
    _Float16 ref;
    std::memcpy(&ref, &c, 2);
    const float got = __half2float(__ushort_as_half(c)), want = static_cast<float>(ref);
    const bool same = std::isnan(want) ? std::isnan(got)
                                       : got == want && std::signbit(got) == std::signbit(want);
    if (!same && bad++ < 5) FAIL_CHECK("half code " << code << ": " << got << " != " << want);
  }
  CHECK(bad == 0);
  // Every 1021st float bit pattern (ties, subnormals, overflow and NaN among them)
  // and the exact ties around 65504 and the subnormal boundary.
  std::vector<uint32_t> patterns;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1021) patterns.push_back(static_cast<uint32_t>(u));
  for (float f : {65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f, 6.1035152e-05f, 2.9802322e-08f,
                  2.9802326e-08f, 5.9604645e-08f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048})
    for (float g : {f, -f}) {
      uint32_t u;
      std::memcpy(&u, &g, 4);
      patterns.push_back(u);
    }
  for (uint32_t u : patterns) {
    float f;
    std::memcpy(&f, &u, 4);
    const uint16_t got = __half_as_ushort(__float2half_rn(f));
    uint16_t want = 0x7fff;
    if (!std::isnan(f)) {
      const _Float16 ref = static_cast<_Float16>(f);
      std::memcpy(&want, &ref, 2);
    }
    if (got != want && bad++ < 5) FAIL_CHECK("float bits " << u << ": " << got << " != " << want);
  }
  CHECK(bad == 0);
}
