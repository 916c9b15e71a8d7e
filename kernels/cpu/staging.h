// Staging of the CPU ops' float arguments: a bf16 or fp16 tensor is upcast exactly
// into an fp32 buffer before the op's fp32 code runs, and each written output is
// rounded once into its dtype afterwards (load, fp32 math, one rounding on store,
// as the GPU kernels do). fp32 tensors are used in place: no copy, no overhead.
#pragma once

#include <array>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/half_convert.h"

namespace trainer::cpu {

// The checks Staging makes of a float argument (CPU, contiguous, f32/bf16/f16),
// for an op that converts parts of it itself.
void check_float_arg(const Tensor& t, const char* op, const char* name);

// A staged argument: fp32 data and its element strides (the tensor's own when it
// is fp32, contiguous ones when it was converted).
struct StagedView {
  float* data;
  std::array<int64_t, Tensor::kMaxDims> stride;
};

// The staging of one op call. Ask for every float argument before computing:
// in() for one that is only read, out() for one that is written (=), inout() for
// one that is read and written (+=, *=); then run the fp32 code and commit().
// Arguments that view the same memory (an in-place call: same pointer, dtype,
// shape and strides) get the same fp32 buffer, so the op sees the aliasing it
// sees in fp32; a partial overlap with a written argument is refused. An out()
// buffer is not loaded (its old contents are undefined) unless another argument
// reads the same memory. Buffers come from a per-thread pool kept across calls
// (grown, never freed), separate from thread_scratch, which the ops use inside.
// Without commit() (an op that throws) the tensors are left untouched.
class Staging {
 public:
  explicit Staging(const char* op);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Contiguous tensors.
  const float* in(const Tensor& t, const char* name) {
    return stage(t, name, true, false, false).data;
  }
  float* out(const Tensor& t, const char* name) { return stage(t, name, false, true, false).data; }
  float* inout(const Tensor& t, const char* name) { return stage(t, name, true, true, false).data; }
  // Any strides (attention's q/k/v views into a fused buffer): the caller indexes
  // the returned data with the returned strides.
  StagedView view(const Tensor& t, const char* name, bool read, bool write) {
    return stage(t, name, read, write, true);
  }

  // Rounds every written staged buffer into its tensor.
  void commit();

 private:
  static constexpr int kMaxArgs = 16;
  struct Entry {
    Tensor tensor;
    const char* name;
    float* buffer;
    bool loaded;
    bool written;
  };

  StagedView stage(const Tensor& t, const char* name, bool read, bool write, bool strided);

  const char* op_;
  size_t pool_base_;
  int num_entries_ = 0;
  Entry entries_[kMaxArgs];
};

}  // namespace trainer::cpu
