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
}  // namespace

void apply_pipeline_stage(model::ModelConfig& cfg, int pp_size, int pp_rank) {
  if (pp_size == 1) return;
  parallel::LayerRange r = parallel::stage_layers(cfg.n_layer, pp_size, 1, pp_rank, 0);
  cfg.layer_begin = r.begin;
  cfg.layer_end = r.end;
  cfg.first_stage = pp_rank == 0;
  cfg.last_stage = pp_rank == pp_size - 1;
}

int activation_slots(const parallel::Schedule& table) {
  SlotTable s;
  for (const Action& a : table) {
    TRAINER_CHECK(a.chunk == 0, "pipeline runner: interleaved tables are not supported");
    if (a.kind == ActionKind::send_backward) continue;  // sends dres (scratch): no slot needed
    s.take(a.micro_batch);
    if (a.kind == ActionKind::backward) s.release(a.micro_batch);
  }
  return std::max(s.used, 1);
}

PipelineRunner::PipelineRunner(parallel::Communicator& pp, int num_micro_batches)
    : pp_(pp), table_(parallel::schedule_1f1b(pp.size(), pp.rank(), num_micro_batches)) {
  slots_ = activation_slots(table_);
}

double PipelineRunner::run_step(model::Model& model, Context& ctx, const Arenas& arenas,
                                const std::function<void(int mb)>& load,
                                const std::function<double()>& loss_sum, float dloss) {
  model::Buffers& buf = model.buffers();
  SlotTable slots;
  auto bind = [&](int mb) {
    int k = slots.take(mb);
    TRAINER_CHECK(k < slots_, "pipeline runner: micro-batch {} needs slot {} of {}", mb, k, slots_);
    buf.bind(model::Category::activations, arenas.activation_slot(k), ctx.device);
  };
  double loss = 0;
  parallel::StageOps ops;
  ops.recv_forward = [&](const Action& a) {
    bind(a.micro_batch);
    pp_.recv(model.stage_input(), a.peer);
  };
  ops.forward = [&](const Action& a) {
    bind(a.micro_batch);
    load(a.micro_batch);
    model.forward(ctx);
    if (model.config().last_stage) loss += loss_sum();
  };
  ops.send_forward = [&](const Action& a) {
    bind(a.micro_batch);
    pp_.isend(model.stage_output(ctx), a.peer);
  };
  ops.recv_backward = [&](const Action& a) {
    bind(a.micro_batch);
    pp_.recv(model.stage_output_grad(), a.peer);
  };
  int last_backward = -1;
  ops.backward = [&](const Action& a) {
    bind(a.micro_batch);
    model.backward(ctx, dloss);
    slots.release(a.micro_batch);
    last_backward = a.micro_batch;
  };
  // The input gradient is in scratch (dres) until the next backward: isend copies it.
  ops.send_backward = [&](const Action& a) {
    TRAINER_CHECK(a.micro_batch == last_backward,
                  "pipeline runner: send_backward of micro-batch {} after backward of {}",
                  a.micro_batch, last_backward);
    pp_.isend(model.stage_input_grad(), a.peer);
  };
  parallel::execute_schedule(table_, ops);
  pp_.wait_sends();
  buf.bind(model::Category::activations, arenas.activation_slot(0), ctx.device);
  return loss;
}

}  // namespace trainer::engine
