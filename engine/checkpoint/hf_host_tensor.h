// HostTensor: a whole tensor in host memory, fp32 row-major, and the layout
// moves between this trainer's and Hugging Face's tensors (import and export).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/error.h"

namespace trainer::engine::checkpoint {

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline HostTensor transpose(const HostTensor& t) {
  TRAINER_CHECK(t.shape.size() == 2, "transpose of a {}-d tensor", t.shape.size());
  int64_t R = t.shape[0], C = t.shape[1];
  HostTensor o{{C, R}, std::vector<float>(t.data.size())};
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) o.data[c * R + r] = t.data[r * C + c];
  return o;
}

// Rows [begin, end) of dim 0.
inline HostTensor rows(const HostTensor& t, int64_t begin, int64_t end) {
  int64_t row = t.shape.size() == 2 ? t.shape[1] : 1;
  HostTensor o{t.shape, {t.data.begin() + begin * row, t.data.begin() + end * row}};
  o.shape[0] = end - begin;
  return o;
}

// GPT-2's Conv1D weights, stored (in, out): transposed on the way in and out.
inline bool gpt2_conv1d_weight(const std::string& name) {
  return ends_with(name, ".weight") &&
         (name.find(".attn.c_proj.") != std::string::npos || name.find(".mlp.c_fc.") != std::string::npos ||
          name.find(".mlp.c_proj.") != std::string::npos);
}

// GPT-2's attention projections, one fused c_attn in HF.
inline bool gpt2_qkv(const std::string& name) {
  return name.find(".attn.q_proj.") != std::string::npos || name.find(".attn.k_proj.") != std::string::npos ||
         name.find(".attn.v_proj.") != std::string::npos;
}

}  // namespace trainer::engine::checkpoint
