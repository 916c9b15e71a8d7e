// What one rank writes into its checkpoint shard: its parameters (or, under
// ZeRO-3, its shard of them), its AdamW moments and fp8 scaling state, each
// under its global name with the slice of the global tensor it holds. One
// list serves the save (engine/checkpoint/checkpointer.cpp) and `trainer
// plan`, which sizes checkpoint.async's host snapshot from it without
// allocating anything.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/checkpoint/slice.h"
#include "engine/optimizer.h"
#include "kernels/tensor.h"
#include "model/buffers.h"

namespace trainer::engine::checkpoint {

struct ShardEntry {
  std::string name;
  std::vector<int64_t> shape;  // as stored
  std::string slice;           // the slice metadata (JSON)
  int64_t numel = 0;           // fp32 elements
  // Exactly one is set: the elements where they live (parameters and AdamW
  // moments, on the model's device), or a host copy made when called (fp8
  // scaling state). Neither is called before the arenas are bound.
  std::function<Tensor()> device;
  std::function<std::vector<float>()> host;
};

// The names a shard stores beside a parameter's own: its AdamW moments and
// fp8 scaling state. A name without one of these suffixes is a parameter.
inline constexpr const char* kExpAvgSuffix = ".exp_avg";
inline constexpr const char* kExpAvgSqSuffix = ".exp_avg_sq";
inline constexpr const char* kFp8StateSuffix = ".fp8_state";
bool is_parameter_tensor(const std::string& name);

std::vector<ShardEntry> shard_entries(const model::Buffers& buffers, const AdamW& optimizer,
                                      const ShardPosition& position);

// Bytes of the entries: the shard's tensor data, which checkpoint.async
// copies to host memory at each save.
size_t shard_bytes(const std::vector<ShardEntry>& entries);

}  // namespace trainer::engine::checkpoint
