// The denominator of MFU: the device's peak FLOP/s for the compute dtype. On
// the CPU there is no datasheet number worth trusting, so it is measured: the
// best of a few large GEMMs through the same linear op the model uses.
#pragma once

#include "engine/config/job_spec.h"
#include "kernels/context.h"

namespace trainer::engine {

double measure_gemm_flops(Context& ctx, int size = 1024, int repeats = 3);
double peak_flops(Context& ctx, ComputeDtype dtype);

}  // namespace trainer::engine
