// The denominator of MFU: the device's peak FLOP/s for the compute dtype. On
// the CPU there is no datasheet number worth trusting, so it is measured: the
// best of a few large GEMMs through the same linear op the model uses.
#pragma once

#include <functional>

#include "engine/config/job_spec.h"
#include "kernels/context.h"

namespace trainer::engine {

double measure_gemm_flops(Context& ctx, int size, int repeats = 3);
// The start-up GEMM's size: 512 x the cube root of the OpenMP threads the
// linear op splits a GEMM over, rounded up to 64, at most 2048. By 512 one
// thread reaches the 2048 figure here (106 vs 105 GFLOP/s) and two reach 91%
// of it, at a seventh of the cost: every `trainer train` pays it at start-up.
int quick_gemm_size();
// CPU: `gemm_size` is the square GEMM measured (0: train logs' quick_gemm_size();
// `trainer bench` uses 2048, closer to the BLAS's real peak, so its MFU is not flattered).
double peak_flops(Context& ctx, ComputeDtype dtype, int gemm_size = 0);

// The CPU's measured peak as training goes. The quick start-up measurement
// (perhaps below the BLAS's best, and perhaps taken while other
// processes held the cores): a step that then achieves more than `peak`
// (FLOP/s per rank) proves it too low, so it is measured again (`measure`,
// at most kMaxPeakRemeasures times in all, counted in `remeasures`) and the
// best kept. Returns the peak to use.
constexpr int kMaxPeakRemeasures = 3;
double refine_cpu_peak(double peak, double achieved, int& remeasures,
                       const std::function<double()>& measure);

}  // namespace trainer::engine
