// The five float storage formats as types (storage type + exact load and
// round-to-nearest-even store from numeric.h), and a dispatcher from a DType
// to its format, shared by the CPU and CUDA cast kernels so both convert with
// the same table.
#pragma once

#include <cstdint>

#include "kernels/error.h"
#include "kernels/numeric.h"
#include "kernels/tensor.h"

namespace trainer::float_format {

struct F32 {
  using T = float;
  static TRAINER_HOST_DEVICE float load(T v) { return v; }
  static TRAINER_HOST_DEVICE T store(float x) { return x; }
};
struct BF16 {
  using T = uint16_t;
  static TRAINER_HOST_DEVICE float load(T v) { return bf16_to_f32(v); }
  static TRAINER_HOST_DEVICE T store(float x) { return f32_to_bf16(x); }
};
struct F16 {
  using T = uint16_t;
  static TRAINER_HOST_DEVICE float load(T v) { return f16_to_f32(v); }
  static TRAINER_HOST_DEVICE T store(float x) { return f32_to_f16(x); }
};
struct E4M3 {
  using T = uint8_t;
  static TRAINER_HOST_DEVICE float load(T v) { return e4m3_to_f32(v); }
  static TRAINER_HOST_DEVICE T store(float x) { return f32_to_e4m3(x); }
};
struct E5M2 {
  using T = uint8_t;
  static TRAINER_HOST_DEVICE float load(T v) { return e5m2_to_f32(v); }
  static TRAINER_HOST_DEVICE T store(float x) { return f32_to_e5m2(x); }
};

// Calls f(Format{}) for the float dtype d (host side).
template <class F>
void with_format(DType d, const char* op, const char* name, F&& f) {
  switch (d) {
    case DType::f32: f(F32{}); return;
    case DType::bf16: f(BF16{}); return;
    case DType::f16: f(F16{}); return;
    case DType::e4m3: f(E4M3{}); return;
    case DType::e5m2: f(E5M2{}); return;
    default: break;
  }
  TRAINER_CHECK(false, "{}: {} has dtype {}, expected fp32, bf16, fp16, e4m3 or e5m2", op, name,
                dtype_name(d));
}

}  // namespace trainer::float_format
