// The part of a parameter's AdamW state this rank holds (AdamW::owned: all
// of it, the overlap of a ZeRO 1/2 shard of the arena with it, or its part of
// a ZeRO-3 unit shard), as a flat range of its local slice. Under ZeRO-3 the
// rank holds its parameter values for exactly the same range, so the save,
// the resume and the Hugging Face import (model.init_from) all address a
// ZeRO-3 rank's values through it.
#pragma once

#include <algorithm>
#include <vector>

#include "engine/checkpoint/slice.h"
#include "engine/optimizer.h"
#include "kernels/tensor.h"
#include "model/buffers.h"

namespace trainer::engine::checkpoint {

struct StateRange {
  Slice slice;           // the parameter's local slice, flat range set to the overlap
  int64_t state_at = 0;  // element index into m and v (and the ZeRO-3 shards)
  bool empty() const { return slice.numel() <= 0; }
  std::vector<int64_t> stored_shape(const model::BufferInfo& info) const {
    return slice.numel() == slice.block_numel() ? info.shape : std::vector<int64_t>{slice.numel()};
  }
  Tensor view(const Tensor& flat) const {
    return Tensor(static_cast<float*>(flat.data) + state_at, {slice.numel()}, DType::f32, flat.device);
  }
};

inline StateRange state_range(const Slice& local, int param, const AdamW& opt) {
  const OwnedPart o = opt.owned(param);
  StateRange r{local, o.state_at};
  r.slice.flat_begin = o.lo;
  r.slice.flat_end = std::max(o.lo, o.hi);
  return r;
}

}  // namespace trainer::engine::checkpoint
