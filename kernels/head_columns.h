// Column blocks of per-head rows, for layers whose heads are built from parts
// (multi-head latent attention: a query head is [no-RoPE part | RoPE part], a
// key head its own no-RoPE part beside a RoPE part every head shares, a value
// head padded to the query/key head size for the attention kernels).
// out (R, Ho, Do) columns [out_col, out_col + width) of every head are written
// from in (R, Hi, Di) columns [in_col, in_col + width):
//   Hi == Ho: head h from head h;
//   Hi == 1:  every head from in's one head (broadcast);
//   Ho == 1:  the sum of in's heads, added in head order in fp32 (the
//             broadcast's backward; the same bits on every backend).
// Other columns of out are left as they are. Tensors contiguous; float dtypes
// f32, bf16 or f16, each independently; fp32 math, one rounding on store.
#pragma once

#include "kernels/dispatch.h"

namespace trainer {

#define TRAINER_OPS(NS)                                                                      \
  namespace NS {                                                                             \
  void copy_head_columns(Context& ctx, Tensor out, int64_t out_col, Tensor in, int64_t in_col, \
                         int64_t width);                                                     \
  }
TRAINER_OPS(cpu)
TRAINER_OPS(cuda)
#undef TRAINER_OPS

inline void copy_head_columns(Context& ctx, Tensor out, int64_t out_col, Tensor in,
                              int64_t in_col, int64_t width) {
  TRAINER_DISPATCH(ctx, copy_head_columns, out, out_col, in, in_col, width);
}

// The argument checks both backends make; returns {rows, out heads, in heads}.
struct HeadColumns {
  int64_t rows, out_heads, in_heads;
};
HeadColumns check_head_columns(const Tensor& out, int64_t out_col, const Tensor& in,
                               int64_t in_col, int64_t width);

}  // namespace trainer
