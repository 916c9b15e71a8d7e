// The CPU backend's cast/amax/found_nonfinite, called directly: these tests check the
// CPU reference, and a CUDA build links them whether or not cuda::cast exists yet.
#pragma once

#include "kernels/cast.h"

namespace precision_test {

inline void cast(trainer::Context& ctx, trainer::Tensor dst, trainer::Tensor src,
                 trainer::Tensor scale = trainer::Tensor{}) {
  trainer::cpu::cast(ctx, dst, src, scale);
}
inline void amax(trainer::Context& ctx, trainer::Tensor out, trainer::Tensor x) {
  trainer::cpu::amax(ctx, out, x);
}
inline void found_nonfinite(trainer::Context& ctx, trainer::Tensor flag, trainer::Tensor x) {
  trainer::cpu::found_nonfinite(ctx, flag, x);
}

}  // namespace precision_test
