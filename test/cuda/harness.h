// Test harness for the [cuda] suite: one shared CUDA context, device buffers that
// upload/download fp32 host data (rounding to bf16 where the tensor is bf16), NaN
// poisoning, the atol + rtol*|ref| / relative-L2 comparison with the worst index,
// and seeded random inputs. Every op test runs the CPU op (the reference) and the
// CUDA op on the same inputs.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/context.h"
#include "kernels/cuda/cuda_state.h"
#include "kernels/memory.h"
#include "kernels/tensor.h"

namespace trainer::cuda_test {

// The process-wide CUDA context (device 0) and a CPU context.
Context& gpu();
Context& cpu();

// Round-to-nearest-even fp32 -> bf16 bits and back (NaN stays NaN).
uint16_t to_bf16(float x);
float from_bf16(uint16_t b);
// Values rounded to bf16 precision (inputs of a bf16 test, so both sides see the same data).
std::vector<float> round_bf16(std::vector<float> v);

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi);

// A device buffer with a shape and dtype (f32, bf16 or i32).
class DeviceTensor {
 public:
  DeviceTensor(std::initializer_list<int64_t> shape, DType dtype = DType::f32);
  ~DeviceTensor();
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  Tensor view() const { return tensor_; }
  operator Tensor() const { return tensor_; }  // NOLINT: tests pass these straight to ops
  int64_t numel() const { return tensor_.numel(); }

  void upload(const std::vector<float>& values);  // f32 or bf16 (rounded)
  void upload_ints(const std::vector<int32_t>& values);
  void upload_bytes(const std::vector<unsigned char>& bytes);  // raw, any dtype
  std::vector<unsigned char> download_bytes() const;
  std::vector<float> download() const;
  void poison();  // all bytes 0xFF: NaN in f32 and bf16

 private:
  Tensor tensor_;
};

// A host fp32 tensor for the CPU reference.
struct HostTensor {
  std::vector<float> data;
  Tensor tensor;
  HostTensor(std::initializer_list<int64_t> shape, std::vector<float> values);
  operator Tensor() const { return tensor; }  // NOLINT
};
Tensor host_ints(std::vector<int32_t>& values, std::initializer_list<int64_t> shape);

struct Tolerance {
  double atol, rtol, rel_l2;
};
constexpr Tolerance kF32Pointwise{1e-6, 1e-5, 1e-6};
constexpr Tolerance kF32Reduction{1e-5, 1e-4, 1e-5};
// Sums over thousands of rows (parameter gradients): summation order differs.
constexpr Tolerance kF32LongSum{1e-4, 1e-4, 1e-5};
constexpr Tolerance kBf16Pointwise{1e-2, 1.6e-2, 8e-3};
// rel_l2 one bf16 ulp (2^-7): with one output element (M = N = 1) it is that
// element's error, and cuBLASLt's bias epilogue may round once more than the CPU op.
constexpr Tolerance kBf16Gemm{2e-2, 3e-2, 8e-3};

// Checks every element (finite, |got - ref| <= atol + rtol*|ref|) and the relative
// L2 error; on failure names the worst element.
void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& ref, Tolerance tol);
// Two runs of the same op must agree bit for bit.
void expect_same_bits(const std::string& what, const std::vector<float>& a,
                      const std::vector<float>& b);

}  // namespace trainer::cuda_test
