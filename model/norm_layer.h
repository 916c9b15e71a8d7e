// Norm: LayerNorm (gpt2: weight and bias) or RMSNorm (llama: weight only).
// Saves its output and statistics; the caller keeps the input alive. Also
// the per-head q/k norms (rows = tokens x heads, width = head_dim).
#pragma once

#include <string>

#include "model/layer_env.h"

namespace trainer::model {

class Norm {
 public:
  void declare(Buffers& buf, const std::string& name, const ModelConfig& cfg, int64_t rows);
  // A norm of `width` columns whose weight gradient on each tp rank covers
  // only part of the rows (its token block, or its heads): summed over tp.
  void declare(Buffers& buf, const std::string& name, const ModelConfig& cfg, int64_t rows,
               int64_t width, bool tp_partial);
  // out() (rows, C) written from in (rows, C)
  void forward(const LayerEnv& env, Tensor in) const;
  // dinp (rows, C) written; dweight, dbias accumulated
  void backward(const LayerEnv& env, Tensor dinp, Tensor dout, Tensor in) const;
  Tensor out(const LayerEnv& env) const { return env.buf.get(out_); }
  BufferId out_id() const { return out_; }

 private:
  bool rms_ = false;
  float eps_ = 1e-5f;
  ParamId weight_, bias_;
  BufferId out_ = -1, mean_ = -1, rstd_ = -1;
};

}  // namespace trainer::model
