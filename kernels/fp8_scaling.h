// Fp8Scaling: per-tensor delayed scaling for FP8 (Transformer Engine's recipe with
// amax_compute_algo "max"), for a set of tensors laid out as TE does, so one
// collective reduces every tensor's amax and one copy moves every scale.
//
// One step, per FP8 tensor i:
//   quantise with scale(i) from earlier steps:  cast(q, x, scale_view(i))
//   record this step's amax:                    amax(amax_view(i), x)   (or record_amax)
//   (the GEMM dequantises with scale_inv(i))
// After the last micro-batch of the step:
//   max-reduce current_amax()[0..size) over the group where the tensor is sharded or
//   replicated (tensor-parallel group, ...), then update() once.
//
// update() is TE's amax_and_scale_update: with history rows [0] = this step's amax
// (accumulating), [1] = oldest, ..., [H-1] = newest,
//   amax   = fmax over all H rows (a NaN entry is skipped, as fmaxf does)
//   scale  = (fp8_max / 2^margin) / amax   if amax is finite and > 0, else unchanged;
//            an inf quotient (amax tiny) becomes FLT_MAX, as TE does
//   scale_inv = 1 / scale
//   history rolls: row i <- row i+1 for 1 <= i < H-1, row H-1 <- row 0, row 0 <- 0.
// With H = 1 the scale follows the last step's amax alone.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor.h"

namespace trainer {

// The largest finite value of an fp8 dtype: 448 (e4m3), 57344 (e5m2); throws otherwise.
float fp8_max(DType format);

class Fp8Scaling {
 public:
  Fp8Scaling() = default;
  // history_len >= 1 (precision.fp8_amax_history), margin >= 0 (precision.fp8_margin);
  // InputError naming the key otherwise.
  Fp8Scaling(int history_len, int margin);

  // Registers one FP8 tensor (e4m3 or e5m2) and returns its index; scale starts at 1.
  // Indices are dense, in registration order.
  int add(DType format);

  int size() const { return static_cast<int>(formats_.size()); }
  int history_len() const { return history_len_; }
  int margin() const { return margin_; }
  DType format(int idx) const;

  // Row 0 of the history: this step's amax of every tensor, contiguous (size()).
  float* current_amax() {
    lay_out();
    return history_.data();
  }
  // The whole history (history_len() rows of size()), row 0 first, and the scales and
  // their inverses: for the copies that move the state to and from the device.
  float* history_data() {
    lay_out();
    return history_.data();
  }
  float* scale_data() { return scale_.data(); }
  float* scale_inv_data() { return scale_inv_.data(); }
  // fp8_max(format(idx)) / 2^margin: the numerator of the scale update.
  float scaled_max(int idx) const;
  // current_amax()[idx] = fmax(current_amax()[idx], amax).
  void record_amax(int idx, float amax);
  // The amax of history row `row` (0 = current) of tensor idx.
  float history(int row, int idx) const;

  // Scales (multiply before the cast to fp8) and their inverses (the GEMM's
  // dequantisation factors), contiguous (size()).
  const float* scales() const { return scale_.data(); }
  const float* scale_invs() const { return scale_inv_.data(); }
  float scale(int idx) const;
  float scale_inv(int idx) const;
  // Sets tensor idx's scale (and scale_inv = 1/scale): for tests and for a scale
  // computed elsewhere; scale must be finite and > 0.
  void set_scale(int idx, float scale);

  // (1) f32 CPU views for the CPU backend's cast / amax ops: amax_view is tensor idx's
  // current amax slot; the others its scale and inverse. Valid until the next add().
  Tensor amax_view(int idx);
  Tensor scale_view(int idx);
  Tensor scale_inv_view(int idx);

  // TE's amax_and_scale_update for every tensor (see the top of this file): the
  // CPU op of kernels/fp8_update.h on this state.
  void update();

  // Checkpointable state (formats, history, scales) as bytes. restore() needs the same
  // tensors in the same order (same count and formats); a different history length
  // (the job changed fp8_amax_history) keeps the newest entries. Bad bytes: InputError
  // naming `source`. The margin is configuration, not state.
  std::string serialize() const;
  // One tensor's state as floats: [scale, history row 0, row 1, ..., row H-1]
  // (for checkpoints that store each GEMM operand under its own name, so any
  // pipeline layout finds its layers' state). set_tensor_state takes such a
  // vector from a run with any history length (keeping the newest entries,
  // as restore() does); InputError naming `source` when it is malformed.
  std::vector<float> tensor_state(int idx) const;
  void set_tensor_state(int idx, const std::vector<float>& state, const std::string& source);
  void restore(std::string_view bytes, const std::string& source);

 private:
  float* row(int r) {
    lay_out();
    return history_.data() + static_cast<size_t>(r) * formats_.size();
  }
  const float* row(int r) const {
    lay_out();
    return history_.data() + static_cast<size_t>(r) * formats_.size();
  }
  // add() only appends: the history is laid out for the new width once, when
  // it is next read. Re-laid out on every add, declaring a model's N fp8
  // operands cost O(N^2 x history_len) (minutes for 15,616 experts' GEMMs).
  void lay_out() const;
  void check_index(int idx) const;

  int history_len_ = 1;
  int margin_ = 0;
  std::vector<DType> formats_;
  mutable std::vector<float> history_;  // (history_len, size()), row 0 = current step
  mutable size_t laid_out_ = 0;         // the width history_ is laid out for
  std::vector<float> scale_;
  std::vector<float> scale_inv_;
};

}  // namespace trainer
