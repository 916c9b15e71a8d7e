// The pipeline step executor: StageOps over the model's stage tensors, with
// non-blocking sends (waited at the end of the step) and blocking receives.
#include "engine/pipeline_runner.h"

#include <algorithm>

#include "kernels/error.h"

namespace trainer::engine {

using parallel::Action;
using parallel::ActionKind;

namespace {
// The slot each micro-batch holds, assigned in table order: taken at the
// micro-batch's first action, returned after its backward.
struct SlotTable {
  std::vector<int> slot_of;  // -1: none held
  std::vector<int> free;
  int used = 0;

  int take(int mb) {
    if (mb >= static_cast<int>(slot_of.size())) slot_of.resize(mb + 1, -1);
    if (slot_of[mb] >= 0) return slot_of[mb];
    if (free.empty()) free.push_back(used++);
    // Lowest free slot first, so the count is the peak of simultaneous holders.
    auto it = std::min_element(free.begin(), free.end());
    slot_of[mb] = *it;
    free.erase(it);
    return slot_of[mb];
  }
  void release(int mb) {
    free.push_back(slot_of[mb]);
    slot_of[mb] = -1;
  }
};

// Ids go to the embedding, targets to the head, the document layout (when
// the model takes it) to every chunk, whose attention and RoPE read it.
bool needs_load(const model::Model& model, int chunk) {
  return model.has_embedding(chunk) || model.has_head(chunk) || model.needs_documents();
}
}  // namespace

void apply_pipeline_stage(model::ModelConfig& cfg, int pp_size, int pp_rank, int virtual_stages) {
  TRAINER_CHECK(pp_size > 1 || virtual_stages == 1, "virtual stages {} without pipeline ranks",
                virtual_stages);
  if (pp_size == 1) return;
  parallel::LayerRange r = parallel::stage_layers(cfg.n_layer, pp_size, virtual_stages, pp_rank, 0);
  cfg.layer_begin = r.begin;
  cfg.layer_end = r.end;
  cfg.chunk_layers.clear();
  if (virtual_stages > 1)
    for (int c = 0; c < virtual_stages; ++c) {
      r = parallel::stage_layers(cfg.n_layer, pp_size, virtual_stages, pp_rank, c);
      cfg.chunk_layers.emplace_back(r.begin, r.end);
    }
  cfg.first_stage = pp_rank == 0;
  cfg.last_stage = pp_rank == pp_size - 1;
}

int activation_slots(const parallel::Schedule& table) {
  int chunks = 1;
  for (const Action& a : table) chunks = std::max(chunks, a.chunk + 1);
  SlotTable s;
  for (const Action& a : table) {
    if (a.kind == ActionKind::send_backward) continue;  // sends dres (scratch): no slot needed
    int key = a.micro_batch * chunks + a.chunk;
    s.take(key);
    if (a.kind == ActionKind::backward) s.release(key);
  }
  return std::max(s.used, 1);
}

std::vector<int> chunk_slots(const parallel::Schedule& table, int chunks) {
  std::vector<SlotTable> s(chunks);
  for (const Action& a : table) {
    TRAINER_CHECK(a.chunk >= 0 && a.chunk < chunks, "pipeline table: chunk {} of {}", a.chunk,
                  chunks);
    if (a.kind == ActionKind::send_backward) continue;
    s[a.chunk].take(a.micro_batch);
    if (a.kind == ActionKind::backward) s[a.chunk].release(a.micro_batch);
  }
  std::vector<int> out;
  for (const SlotTable& t : s) out.push_back(std::max(t.used, 1));
  return out;
}

std::vector<std::pair<int, size_t>> activation_slot_plan(const parallel::Schedule& table,
                                                         const model::Model& model) {
  std::vector<int> n = chunk_slots(table, model.num_chunks());
  std::vector<std::pair<int, size_t>> out;
  for (int c = 0; c < model.num_chunks(); ++c) out.emplace_back(n[c], model.chunk_activation_bytes(c));
  return out;
}

PipelineRunner::PipelineRunner(parallel::Communicator& pp, int num_micro_batches, int virtual_stages)
    : pp_(pp),
      table_(parallel::pipeline_schedule(pp.size(), pp.rank(), num_micro_batches, virtual_stages)),
      chunks_(virtual_stages),
      slots_(chunk_slots(table_, virtual_stages)) {}

void PipelineRunner::run_step(model::Model& model, Context& ctx, const Arenas& arenas,
                              const std::function<void(int mb, int chunk)>& load,
                              const std::function<void()>& on_loss, float dloss, float aux_dloss) {
  TRAINER_CHECK(model.num_chunks() == chunks_, "pipeline runner: {} model chunks, table for {}",
                model.num_chunks(), chunks_);
  std::vector<SlotTable> slots(chunks_);  // one pool per chunk, as chunk_slots() counts them
  auto key = [&](const Action& a) { return a.micro_batch * chunks_ + a.chunk; };
  auto bind = [&](const Action& a) {
    int k = slots[a.chunk].take(a.micro_batch);
    TRAINER_CHECK(k < slots_[a.chunk], "pipeline runner: micro-batch {} needs slot {} of {} of chunk {}",
                  a.micro_batch, k, slots_[a.chunk], a.chunk);
    model.bind_chunk(a.chunk, arenas.activation_slot(a.chunk, k), ctx.device);
  };
  // Each run of consecutive sends and receives goes out as one batch
  // (batch_p2p: one NCCL group; with MPI isends and blocking receives in
  // order), so neighbours exchanging both ways pair up (simulate_batched).
  std::vector<parallel::P2pOp> batch;
  parallel::StageOps ops;
  ops.recv_forward = [&](const Action& a) {
    bind(a);
    batch.push_back({parallel::P2pOp::recv, model.stage_input(a.chunk), a.peer});
  };
  ops.forward = [&](const Action& a) {
    bind(a);
    if (needs_load(model, a.chunk)) load(a.micro_batch, a.chunk);
    model.forward(ctx, a.chunk);
    if (model.has_head(a.chunk)) on_loss();
  };
  ops.send_forward = [&](const Action& a) {
    bind(a);
    batch.push_back({parallel::P2pOp::send, model.stage_output(ctx, a.chunk), a.peer});
  };
  ops.recv_backward = [&](const Action& a) {
    bind(a);
    batch.push_back({parallel::P2pOp::recv, model.stage_output_grad(a.chunk), a.peer});
  };
  int last_backward = -1;
  ops.backward = [&](const Action& a) {
    bind(a);
    model.backward(ctx, dloss, a.chunk, aux_dloss);
    slots[a.chunk].release(a.micro_batch);
    last_backward = key(a);
  };
  // The input gradient is in scratch (dres) until the next backward: the
  // batch goes out before any compute action (MPI's isend copies it; NCCL
  // reads it in stream order, before the next backward writes it).
  ops.send_backward = [&](const Action& a) {
    TRAINER_CHECK(key(a) == last_backward,
                  "pipeline runner: send_backward of micro-batch {} chunk {} after another backward",
                  a.micro_batch, a.chunk);
    batch.push_back({parallel::P2pOp::send, model.stage_input_grad(), a.peer});
  };
  ops.end_batch = [&] {
    pp_.batch_p2p(batch);
    batch.clear();
  };
  parallel::execute_schedule(table_, ops);
  pp_.wait_sends();
  model.bind_chunk(0, arenas.activation_slot(0, 0), ctx.device);
}

void PipelineRunner::run_forward(model::Model& model, Context& ctx, const Arenas& arenas,
                                 const std::function<void(int chunk)>& load,
                                 const std::function<void()>& on_loss) {
  const int p = pp_.size(), prev = (pp_.rank() + p - 1) % p, next = (pp_.rank() + 1) % p;
  for (int c = 0; c < model.num_chunks(); ++c) {
    model.bind_chunk(c, arenas.activation_slot(c, 0), ctx.device);
    if (needs_load(model, c)) load(c);
    if (!model.has_embedding(c)) pp_.recv(model.stage_input(c), prev);
    model.forward(ctx, c);
    if (model.has_head(c))
      on_loss();
    else
      pp_.send(model.stage_output(ctx, c), next);
  }
  model.bind_chunk(0, arenas.activation_slot(0, 0), ctx.device);
}

}  // namespace trainer::engine
