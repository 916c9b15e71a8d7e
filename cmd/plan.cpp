// trainer plan JOB.yaml [--world N] [--set ...]: validates the job and prints
// what each rank would hold, computed by the same code that `train` allocates
// with, without allocating or launching anything.
#include <fmt/format.h>

#include "cmd/subcommand.h"
#include "engine/checkpoint/shard_contents.h"
#include "engine/config/job_spec.h"
#include "engine/memory_plan.h"
#include "engine/model_from_spec.h"
#include "engine/mesh_from_spec.h"
#include "engine/pipeline_runner.h"
#include "model/model.h"
#include "model/moe_layer.h"
#include "engine/zero_layout.h"

namespace trainer::cmd {
namespace {

struct PlanArgs {
  std::string job;
  std::vector<std::string> overrides;
  int world = 1;
};

Registrar reg("plan", "validate a job and print its per-rank memory plan", [](CLI::App& sub) {
  auto args = std::make_shared<PlanArgs>();
  sub.add_option("job", args->job, "job spec (YAML)")->required();
  sub.add_option("--set", args->overrides, "override a key: key.path=value (repeatable)");
  sub.add_option("--world", args->world, "number of ranks to plan for")->check(whole_number(1, 1 << 24));
  return std::function<int()>([args] {
    engine::JobSpec spec = engine::load_job_spec(args->job, args->overrides);
    parallel::MeshShape shape = engine::resolve_job_mesh(spec, args->world);
    const int micro_batches = spec.train.global_batch / (spec.train.micro_batch * shape.dp);
    // One plan per pipeline stage (one in all without pp), by the same
    // arithmetic as Trainer::setup, for dp rank 0 and tp rank 0.
    for (int stage = 0; stage < shape.pp; ++stage) {
      model::ModelConfig cfg = engine::model_config(spec);
      engine::apply_pipeline_stage(cfg, shape.pp, stage, shape.virtual_stages);
      cfg.moe.ep = shape.ep;  // each rank holds n_experts / ep routed experts
      // run.device: cuda plans the CUDA backend (auto plans the CPU's: what it
      // resolves to depends on the machine that trains).
      const Device device = spec.run.device == engine::DeviceKind::cuda ? Device::cuda : Device::cpu;
      engine::apply_device(cfg, spec, device);
      // ZeRO shards over the gradient group (dp, or dp x cp with context
      // parallelism); with expert parallelism the routed experts over edp
      // (Trainer::setup).
      const engine::ZeroAxes axes = engine::zero_axes(shape, spec.parallel.zero);
      const engine::ZeroGroup dense{shape.size(axes.dense), 0}, experts{shape.size(axes.expert), 0};
      engine::apply_zero_sharding(cfg, spec.parallel.zero, axes, dense.size,
                                  engine::zero_double_buffers(shape, spec.parallel.zero,
                                                               spec.parallel.zero_overlap));
      model::Model model(cfg, engine::micro_batch_shape(spec));
      engine::ZeroLayout layout =
          engine::zero_layout(model.buffers(), spec.parallel.zero, dense, experts);
      const int64_t arena_elems = layout.arena_elems;
      engine::AdamW optimizer(spec.optimizer, model.buffers(), std::move(layout));
      std::vector<std::pair<int, size_t>> slots;  // per model chunk
      if (shape.pp > 1)
        slots = engine::activation_slot_plan(
            parallel::pipeline_schedule(shape.pp, stage, micro_batches, shape.virtual_stages), model);
      engine::MemoryPlan plan =
          engine::plan_memory(model.buffers(), optimizer, arena_elems, 1, slots, device);
      if (stage == 0) {
        fmt::print("job {}: {} model, {} layers, d_model {}, {} heads ({} kv){}, vocab {} (padded {})\n",
                   spec.source_path, engine::to_string(spec.model.family), spec.model.n_layer,
                   spec.model.d_model, spec.model.n_head, model.config().n_kv_head,
                   engine::attention_options(spec.model), spec.model.vocab_size,
                   model.config().padded_vocab());
        fmt::print("micro-batch {} x {} tokens, global batch {}, {} accumulation steps\n",
                   spec.train.micro_batch, spec.train.seq_len, spec.train.global_batch,
                   micro_batches);
        fmt::print("mesh: {}, zero {}\n", shape.str(), spec.parallel.zero);
        if (shape.cp > 1) {
          const int64_t kv = int64_t(spec.train.micro_batch) * spec.train.seq_len *
                             model.config().local_kv_heads() * model.config().head_dim();
          fmt::print("context parallel: each rank holds {} of the {} tokens of a sequence (2 of {} "
                     "chunks); attention gathers the whole sequence's K/V ({} elements each, "
                     "cp.* scratch); gradients are averaged over dp x cp = {}{}\n",
                     spec.train.seq_len / shape.cp, spec.train.seq_len, 2 * shape.cp, kv,
                     shape.dp_cp(), spec.parallel.zero >= 1 ? ", ZeRO shards over them" : "");
        }
        if (spec.model.moe.enabled)
          fmt::print("MoE: {}; over ep {}: {} on each rank; ZeRO shards {}\n",
                     engine::moe_options(spec.model.moe), shape.ep, spec.model.moe.n_experts / shape.ep,
                     axes.experts_apart()
                         ? fmt::format("them over edp {} and the rest over {} {}", experts.size,
                                       shape.cp > 1 ? "dp x cp" : "dp", dense.size)
                     : spec.parallel.zero == 0
                         ? std::string("nothing (zero 0)")
                         : fmt::format("over {} {}", shape.cp > 1 ? "dp x cp" : "dp", dense.size));
        if (spec.model.moe.enabled && shape.ep > 1 && !spec.model.moe.capacity_factor) {
          const model::ModelConfig& mc = model.config();
          const int64_t rows = model::moe_plan_size(mc, mc.moe, model.batch()).rows;
          const int64_t balanced = model::residual_rows(mc, model.batch()) * mc.moe.top_k;
          const int64_t worst = int64_t(shape.ep) * model::residual_rows(mc, model.batch()) *
                                std::min(mc.moe.top_k, mc.moe.local_experts());
          const std::string bound =
              rows >= worst ? std::string("the worst case (every rank's tokens on one rank's "
                                          "experts), so none is refused")
                            : fmt::format("the worst case would be {:.3g}x; a micro-batch routed "
                                          "beyond the plan is refused",
                                          double(worst) / double(balanced));
          fmt::print("dropless ep: each MoE layer's experts are planned for {} rows a micro-batch, "
                     "{:.3g}x the balanced {} (model.moe.ep_recv_headroom {:g}); {}\n",
                     rows, double(rows) / double(balanced), balanced,
                     spec.model.moe.ep_recv_headroom, bound);
        }
        if (shape.pp > 1)
          fmt::print("{}\n", parallel::describe_schedule(shape.pp, micro_batches, shape.virtual_stages));
      }
      if (shape.pp == 1) {
        fmt::print("per-rank memory (dp rank 0)\n{}", plan.describe());
      } else {
        // Interleaved: the rank's chunks, e.g. "layers 0-1 and 4-5".
        std::string layers = fmt::format("{}-{}", cfg.layer_begin, cfg.stage_layer_end() - 1);
        for (size_t c = 1; c < cfg.chunk_layers.size(); ++c)
          layers += fmt::format(" and {}-{}", cfg.chunk_layers[c].first, cfg.chunk_layers[c].second - 1);
        fmt::print("pipeline stage {} (layers {}{}{}), per-rank memory (dp rank 0)\n{}", stage,
                   layers, cfg.first_stage ? ", embedding" : "", cfg.last_stage ? ", head" : "",
                   plan.describe());
      }
      if (spec.model.moe.enabled) {
        int64_t expert = 0;
        for (const auto& p : model.buffers().params())
          if (p.spec.expert) expert += int64_t(model.buffers().buffers()[p.value].bytes / 4);
        fmt::print("  of the parameters, routed experts {} ({} of {} per MoE layer)\n", expert,
                   spec.model.moe.n_experts / shape.ep, spec.model.moe.n_experts);
        if (axes.experts_apart()) {
          int64_t shard[2] = {0, 0};  // dense, expert
          for (const engine::OwnedRange& r : optimizer.layout().owned) shard[r.expert] += r.size();
          fmt::print("  of the zero {} shards, dense {} elements (1/{} of theirs), routed experts {} "
                     "(1/{})\n",
                     spec.parallel.zero, shard[0], dense.size, shard[1], experts.size);
        }
      }
      if (spec.checkpoint.async) {
        // What this rank (dp, tp, ep rank 0: the one writing every replicated
        // tensor) copies to host memory at each background save.
        const engine::checkpoint::ShardPosition pos = engine::checkpoint::shard_position(
            {.dp_size = dense.size, .zero = spec.parallel.zero, .ep_size = shape.ep});
        const size_t bytes =
            engine::checkpoint::shard_bytes(engine::checkpoint::shard_entries(model.buffers(), optimizer, pos));
        fmt::print("  host memory, not in the total: checkpoint.async snapshot {} bytes ({})\n", bytes,
                   engine::format_bytes(static_cast<double>(bytes)));
      }
      if (cfg.fp8_cache_weights) {
        const model::Buffers& b = model.buffers();
        size_t cache = 0;
        for (int i = 0; b.fp8() && i < b.fp8()->size(); ++i)
          if (b.fp8_weight_cache(i) >= 0) cache += b.buffers()[b.fp8_weight_cache(i)].bytes;
        fmt::print("  of the compute copy, fp8 weight codes kept for the step {} bytes\n", cache);
      }
    }
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
