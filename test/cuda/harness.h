// Test harness for the [cuda] suite: one shared CUDA context, device and host
// buffers that take and give fp32 values in any of fp32, bf16 and fp16 storage
// (rounding to nearest even into the narrow ones, as kernels/numeric.h does), NaN
// poisoning, the atol + rtol*|ref| / relative-L2 comparison with the worst index,
// and seeded random inputs. Every op test runs the CPU op (the reference) and the
// CUDA op on the same inputs in the same dtypes.
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

// True in a build against the host CUDA emulator (test/cuda_emu), where every
// GPU thread is a fiber and a warp collective costs a context switch per lane.
// The largest sweeps there keep one case per shape class at their biggest size
// (every case still runs at the ragged small sizes, which cross the same block
// boundaries); on a GPU everything runs.
constexpr bool emulated() {
#ifdef TRAINER_CUDA_EMULATOR
  return true;
#else
  return false;
#endif
}
Context& cpu();

// Values rounded to `dtype` (f32: unchanged; bf16, f16: to nearest even), the
// inputs of a 16-bit test, so both backends see the same data.
std::vector<float> round_to(std::vector<float> v, DType dtype);
// fp32 values as the bytes of an f32, bf16 or f16 tensor, and back.
std::vector<unsigned char> encode(const std::vector<float>& values, DType dtype);
std::vector<float> decode(const unsigned char* bytes, size_t n, DType dtype);

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi);

// A device buffer with a shape and dtype (f32, bf16, f16 or i32). With an
// `offset`, the tensor starts that many elements into its buffer, as a slice or
// shard does (offset 1 breaks cudaMalloc's 16-byte alignment); the buffer still
// ends where the tensor does, so an access past it is still reported.
class DeviceTensor {
 public:
  DeviceTensor(std::initializer_list<int64_t> shape, DType dtype = DType::f32,
               int64_t offset = 0);
  ~DeviceTensor();
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  Tensor view() const { return tensor_; }
  operator Tensor() const { return tensor_; }  // NOLINT: tests pass these straight to ops
  int64_t numel() const { return tensor_.numel(); }

  void upload(const std::vector<float>& values);  // f32, or bf16 / f16 (rounded)
  void upload_ints(const std::vector<int32_t>& values);
  void upload_bytes(const std::vector<unsigned char>& bytes);  // raw, any dtype
  std::vector<unsigned char> download_bytes() const;
  std::vector<float> download() const;
  void poison();  // all bytes 0xFF: NaN in f32, bf16 and f16

 private:
  Tensor tensor_;
  void* buffer_;  // what device_alloc returned: tensor_.data less the offset
};

// A host tensor for the CPU reference, fp32 by default. `data` is an fp32
// tensor's memory (the CPU op writes it); a bf16 or f16 tensor lives in `bytes`
// and values() decodes whatever it holds now (any dtype).
struct HostTensor {
  std::vector<float> data;
  std::vector<unsigned char> bytes;
  Tensor tensor;
  HostTensor(std::initializer_list<int64_t> shape, std::vector<float> values,
             DType dtype = DType::f32);
  operator Tensor() const { return tensor; }  // NOLINT
  std::vector<float> values() const;
};
Tensor host_ints(std::vector<int32_t>& values, std::initializer_list<int64_t> shape);
// A device fp64 tensor's values (the router statistics' sums).
std::vector<double> download_f64(const Tensor& t);

// The linear ops' paths: cuBLASLt's epilogues; the fallback kernels after a
// plain GEMM (gemm_epilogues off); and the fallback with its fp32 staging cut
// into blocks of 16 rows (staged_gemm.cuh: staging_block_bytes of 1 byte rounds
// up to 16 rows). ScopedStaging sets one on gpu() and restores the defaults.
struct StagingMode {
  bool epilogues;
  size_t staging_block_bytes;
};
inline constexpr StagingMode kStagingModes[] = {
    {true, kStagingBlockBytes}, {false, kStagingBlockBytes}, {false, 1}};
struct ScopedStaging {
  explicit ScopedStaging(const StagingMode& mode);
  ~ScopedStaging();
  ScopedStaging(const ScopedStaging&) = delete;
  ScopedStaging& operator=(const ScopedStaging&) = delete;
};
// "epilogues", "fallback" or "fallback in 16-row blocks": gpu()'s mode now.
std::string staging_mode_name();

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
// fp16 keeps 11 significant bits to bf16's 8: an ulp is 2^-10 relative (9.8e-4), so
// rtol 2e-3 allows the one-ulp difference of outputs rounded from fp32 values that
// differ in summation order, and rel_l2 2e-3 that ulp on a one-element output.
constexpr Tolerance kF16Pointwise{1e-4, 2e-3, 1e-3};
constexpr Tolerance kF16Gemm{1e-3, 2e-3, 2e-3};
// The tolerance of an output stored in `dtype` (pointwise or GEMM-like), given the
// fp32 one.
Tolerance narrow_tolerance(DType dtype, Tolerance f32, bool gemm);

// Checks every element (finite, |got - ref| <= atol + rtol*|ref|) and the relative
// L2 error; on failure names the worst element.
void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& ref, Tolerance tol);
// Two runs of the same op must agree bit for bit.
void expect_same_bits(const std::string& what, const std::vector<float>& a,
                      const std::vector<float>& b);

}  // namespace trainer::cuda_test
