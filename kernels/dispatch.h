// Backend dispatch shared by every op header: an op `name` is implemented as
// cpu::name and (in CUDA builds) cuda::name, both taking (Context&, ...), and
// the generic trainer::name picks one by ctx.device.
#pragma once

#include "kernels/context.h"
#include "kernels/error.h"

#ifdef TRAINER_CUDA
#define TRAINER_DISPATCH(ctx, name, ...)                                            \
  do {                                                                              \
    if ((ctx).device == ::trainer::Device::cuda)                                    \
      ::trainer::cuda::name(ctx, __VA_ARGS__);                                      \
    else                                                                            \
      ::trainer::cpu::name(ctx, __VA_ARGS__);                                       \
  } while (0)
#else
#define TRAINER_DISPATCH(ctx, name, ...)                                            \
  do {                                                                              \
    TRAINER_CHECK((ctx).device == ::trainer::Device::cpu,                          \
                  "{}: this build has no CUDA backend", #name);                     \
    ::trainer::cpu::name(ctx, __VA_ARGS__);                                         \
  } while (0)
#endif
