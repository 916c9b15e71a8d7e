#include "engine/checkpoint/shard_contents.h"

#include <memory>

#include "engine/checkpoint/state_range.h"

namespace trainer::engine::checkpoint {

namespace {

// FP8 delayed-scaling state, one small tensor per GEMM operand under the
// operand's global name: after the step's amax max-reduction it is the same
// on every tp, cp and dp rank, so the stage's first replica writes it (one
// copy: under ZeRO-3 every dp rank writes parameters, and two copies of a
// whole tensor would not load), and any layout finds its own layers' entries.
// A routed expert's operands are the same on the ranks holding the expert:
// its first replica writes them.
void add_fp8_state(std::vector<ShardEntry>& out, const model::Buffers& buffers,
                   const ShardPosition& position) {
  const Fp8Scaling* f = buffers.fp8();
  if (!f || position.tp_rank != 0) return;
  for (int i = 0; i < f->size(); ++i) {
    if (!(buffers.fp8_expert(i) ? position.write_expert_replicated : position.write_replicated))
      continue;
    const int64_t n = static_cast<int64_t>(f->tensor_state(i).size());
    out.push_back({buffers.fp8_names()[i] + kFp8StateSuffix, {n}, Slice::whole({n}).to_json().dump(), n,
                   {}, [f, i] { return f->tensor_state(i); }});
  }
}

}  // namespace

std::vector<ShardEntry> shard_entries(const model::Buffers& buffers, const AdamW& optimizer,
                                      const ShardPosition& position) {
  std::vector<ShardEntry> out;
  const bool sharded = optimizer.layout().shards_parameters();
  for (int i = 0; i < static_cast<int>(buffers.params().size()); ++i) {
    const model::Buffers::Param& p = buffers.params()[i];
    // A parameter replicated over tp (norms, biases of row-parallel layers,
    // positions) is identical on every tp rank, state included: tp rank 0 writes it.
    if (p.spec.tp_dim < 0 && position.tp_rank != 0) continue;
    // A shard held by several tp ranks (replicated KV heads): its first holder writes it.
    if (position.tp_rank % p.spec.tp_replicas != 0) continue;
    if (p.spec.tied_copy) continue;  // the first pipeline stage writes the tied table
    const model::BufferInfo& info = buffers.buffers()[p.value];
    const Slice slice = local_slice(p.spec, info.shape, position);
    const StateRange st = state_range(slice, i, optimizer);
    const std::string sj = st.slice.to_json().dump();
    if (position.writes_params(p.spec) && sharded && !st.empty()) {
      // ZeRO-3: every dp rank writes its shard of the values, as of the state.
      out.push_back({p.spec.name, st.stored_shape(info), sj, st.slice.numel(),
                     [st, &optimizer] { return st.view(optimizer.param_shards()); }, {}});
    } else if (position.writes_params(p.spec) && !sharded) {
      const model::BufferId id = p.value;
      int64_t n = 1;
      for (int64_t d : info.shape) n *= d;
      out.push_back({p.spec.name, info.shape, slice.to_json().dump(), n,
                     [id, &buffers] { return buffers.get(id); }, {}});
    }
    if (!position.writes_optimizer(p.spec) || st.empty()) continue;
    out.push_back({p.spec.name + kExpAvgSuffix, st.stored_shape(info), sj, st.slice.numel(),
                   [st, &optimizer] { return st.view(optimizer.m()); }, {}});
    out.push_back({p.spec.name + kExpAvgSqSuffix, st.stored_shape(info), sj, st.slice.numel(),
                   [st, &optimizer] { return st.view(optimizer.v()); }, {}});
  }
  add_fp8_state(out, buffers, position);
  return out;
}

bool is_parameter_tensor(const std::string& name) {
  for (const std::string suffix : {kExpAvgSuffix, kExpAvgSqSuffix, kFp8StateSuffix})
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return false;
  return true;
}

size_t shard_bytes(const std::vector<ShardEntry>& entries) {
  size_t n = 0;
  for (const ShardEntry& e : entries) n += static_cast<size_t>(e.numel) * sizeof(float);
  return n;
}

}  // namespace trainer::engine::checkpoint
