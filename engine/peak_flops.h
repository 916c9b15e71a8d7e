// The denominator of MFU: the device's peak FLOP/s for the compute dtype. On
// the CPU there is no datasheet number worth trusting, so it is measured: the
// best of a few large GEMMs through the same linear op the model uses.
#pragma once

#include <functional>

#include "engine/config/job_spec.h"
#include "kernels/context.h"

namespace trainer::engine {

double measure_gemm_flops(Context& ctx, int size = 1024, int repeats = 3);
// CPU: `gemm_size` is the square GEMM measured (train logs use a quick 1024;
// `trainer bench` uses 2048, closer to the BLAS's real peak, so its MFU is not flattered).
double peak_flops(Context& ctx, ComputeDtype dtype, int gemm_size = 1024);

// The CPU's measured peak as training goes. The quick start-up measurement
// (a 1024 GEMM, below the BLAS's best, and perhaps taken while other
// processes held the cores): a step that then achieves more than `peak`
// (FLOP/s per rank) proves it too low, so it is measured again (`measure`,
// at most kMaxPeakRemeasures times in all, counted in `remeasures`) and the
// best kept. Returns the peak to use.
constexpr int kMaxPeakRemeasures = 3;
double refine_cpu_peak(double peak, double achieved, int& remeasures,
                       const std::function<double()>& measure);

}  // namespace trainer::engine
