// The denominator of MFU: the device's peak FLOP/s for the compute dtype. On
// the CPU there is no datasheet number worth trusting, so it is measured: the
// best of a few large GEMMs through the same linear op the model uses.
#pragma once

#include "engine/config/job_spec.h"
#include "kernels/context.h"

namespace trainer::engine {

double measure_gemm_flops(Context& ctx, int size = 1024, int repeats = 3);
// CPU: `gemm_size` is the square GEMM measured (train logs use a quick 1024;
// `trainer bench` uses 2048, closer to the BLAS's real peak, so its MFU is not flattered).
double peak_flops(Context& ctx, ComputeDtype dtype, int gemm_size = 1024);

}  // namespace trainer::engine
