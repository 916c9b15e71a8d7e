// Peak FLOP/s: measured on the CPU, a datasheet table on known GPUs.
#include "engine/peak_flops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include <omp.h>

#include "kernels/linear.h"
#include "kernels/memory.h"

namespace trainer::engine {

double measure_gemm_flops(Context& ctx, int size, int repeats) {
  int64_t n = size;
  size_t bytes = static_cast<size_t>(n * n) * sizeof(float);
  void* a = device_alloc(ctx.device, bytes);
  void* b = device_alloc(ctx.device, bytes);
  void* c = device_alloc(ctx.device, bytes);
  std::vector<float> host(static_cast<size_t>(n * n));
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
  Tensor ta(a, {n, n}), tb(b, {n, n}), tc(c, {n, n});
  ta.device = tb.device = tc.device = ctx.device;
  copy_from_host(ta, host.data());
  copy_from_host(tb, host.data());
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    linear_forward(ctx, tc, ta, tb, Tensor{});
    copy_to_host(host.data(), tc.slice(0, 1));  // waits for the GPU
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * n * n * n / dt);  // first run warms up
  }
  device_free(ctx.device, a);
  device_free(ctx.device, b);
  device_free(ctx.device, c);
  return best;
}

int quick_gemm_size() {
  const double threads = std::max(1, omp_get_max_threads());
  const int n = static_cast<int>(std::ceil(512 * std::cbrt(threads) / 64 - 1e-9)) * 64;
  return std::clamp(n, 512, 2048);
}

double refine_cpu_peak(double peak, double achieved, int& remeasures,
                       const std::function<double()>& measure) {
  if (achieved <= peak || remeasures >= kMaxPeakRemeasures) return peak;
  ++remeasures;
  return std::max(peak, measure());
}

double peak_flops(Context& ctx, ComputeDtype dtype, int gemm_size) {
  if (ctx.device == Device::cpu) {
    // Measured once per size per process: every Trainer asks (tests build many).
    static std::map<int, double> measured;
    if (gemm_size <= 0) gemm_size = quick_gemm_size();
    auto it = measured.find(gemm_size);
    if (it == measured.end()) it = measured.emplace(gemm_size, measure_gemm_flops(ctx, gemm_size)).first;
    return it->second;
  }
  // H100/H200 SXM dense: 989.4 TFLOP/s bf16/fp16, 1978.9 fp8, 494.7 tf32.
  switch (dtype) {
    case ComputeDtype::fp8: return 1978.9e12;
    case ComputeDtype::bf16:
    case ComputeDtype::fp16: return 989.4e12;
    case ComputeDtype::fp32: return 494.7e12;
  }
  return 989.4e12;
}

}  // namespace trainer::engine
