// See head_columns.h: the checks both backends share.
#include "kernels/head_columns.h"

#include "kernels/error.h"

namespace trainer {

HeadColumns check_head_columns(const Tensor& out, int64_t out_col, const Tensor& in,
                               int64_t in_col, int64_t width) {
  TRAINER_CHECK(out.ndim == 3 && in.ndim == 3, "copy_head_columns: out {} and in {} must be (rows, "
                "heads, columns)", out.str(), in.str());
  TRAINER_CHECK(out.contiguous() && in.contiguous(), "copy_head_columns: out {} and in {} must be "
                "contiguous", out.str(), in.str());
  TRAINER_CHECK(out.size(0) == in.size(0), "copy_head_columns: out {} and in {} differ in rows",
                out.str(), in.str());
  const int64_t ho = out.size(1), hi = in.size(1);
  TRAINER_CHECK(hi == ho || hi == 1 || ho == 1, "copy_head_columns: out's {} heads from in's {}: "
                "equal, or one of them 1", ho, hi);
  TRAINER_CHECK(width >= 0 && out_col >= 0 && in_col >= 0 && out_col + width <= out.size(2) &&
                    in_col + width <= in.size(2),
                "copy_head_columns: columns [{}, {}) of out {} from [{}, {}) of in {}", out_col,
                out_col + width, out.str(), in_col, in_col + width, in.str());
  TRAINER_CHECK(out.data != in.data || out.numel() == 0, "copy_head_columns: out and in alias");
  return {out.size(0), ho, hi};
}

}  // namespace trainer
