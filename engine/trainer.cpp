// The training loop. Sample order depends only on the seed and the global
// batch: step s uses samples [s*G, (s+1)*G), so any data-parallel layout sees
// the same data as one rank.
#include "engine/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_interop.h"
#include "engine/checkpoint/resume_check.h"
#include "engine/data/sample_source.h"
#include "engine/documents.h"
#include "engine/lr_schedule.h"
#include "engine/mesh_from_spec.h"
#include "engine/model_from_spec.h"
#include "engine/peak_flops.h"
#include "engine/stop_signal.h"
#include "engine/tensorboard_metrics.h"
#include "engine/zero_part_sync.h"
#include "kernels/cuda/nvtx.h"
#include "kernels/elementwise.h"
#include "kernels/memory.h"
#include "kernels/norm.h"
#include "model/rng.h"
#include "parallel/embedding_group.h"
#include "parallel/kv_replicas.h"

namespace trainer::engine {

namespace fs = std::filesystem;

Trainer::Trainer(const JobSpec& spec, TrainerOptions options)
    : spec_(spec), options_(options), owned_mesh_(make_job_mesh(spec)) {
  mesh_ = owned_mesh_.get();
  setup();
}

Trainer::Trainer(const JobSpec& spec, parallel::Mesh& mesh, TrainerOptions options)
    : spec_(spec), options_(options), mesh_(&mesh) {
  setup();
}

namespace {

// A run that resumes at step k (0: starts afresh) replays the steps after k:
// their lines from the earlier run are dropped, so metrics.jsonl holds each
// step once, from the trajectory that continues. Lines without a step stay.
void drop_metrics_after(const std::string& path, int step) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  std::istringstream in(checkpoint::read_text_file(path));
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const std::string key = "{\"step\": ";
    if (line.rfind(key, 0) == 0 && std::atoll(line.c_str() + key.size()) > step) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped) checkpoint::replace_file_atomically(path, kept);
}

}  // namespace

void Trainer::setup() {
  const JobSpec& spec = spec_;
  if (options_.write_run_dir) {
    // Before any work: a run that trains for hours and then cannot save is lost.
    checkpoint::check_output_dir(spec.run.dir, "run.dir");
    checkpoint::check_output_dir(checkpoint::checkpoint_root(spec),
                                 spec.checkpoint.dir.empty() ? "run.dir" : "checkpoint.dir");
  }
  const parallel::MeshShape& shape = mesh_->shape();
  Device device = mesh_->device();
  precision_ = std::make_unique<MixedPrecision>(spec.precision);
  device_ = std::make_unique<DeviceContext>(device, mesh_->env().local_rank);
  ctx_ = device_->context();
  timers_ = std::make_unique<StepTimers>(spec.log.timers, ctx_);
  // GPU ranks: every collective in stream order with the ops (stream_order.h).
  for (parallel::Axis axis : parallel::kAllAxes) parallel::bind_compute_stream(mesh_->comm(axis), ctx_);
  if (!mesh_->logs()) options_.log = nullptr;
  profile_ = std::make_unique<ProfileWindow>(spec.log, mesh_->comm(parallel::Axis::world).rank(),
                                             shape.world, ctx_, options_.log);
  dp_size_ = shape.dp;
  dp_rank_ = mesh_->coords().dp;
  grad_axis_ = shape.cp > 1 ? parallel::Axis::dp_cp : parallel::Axis::dp;
  grad_size_ = shape.size(grad_axis_);
  const int T = spec.train.seq_len, B = spec.train.micro_batch;
  accum_steps_ = spec.train.global_batch / (B * dp_size_);
  batches_.emplace(spec.train);

  model::ModelConfig cfg = model_config(spec);
  if (device == Device::cuda && cfg.fp8) {
    // Hopper's FP8 GEMMs want 16-byte leading dims; a block GEMM's are these sizes.
    const int64_t tokens = int64_t(B) * T, q = int64_t(cfg.n_head) * cfg.head_dim(),
                  kv = int64_t(cfg.n_kv_head) * cfg.head_dim();
    // d_ff only where some layer keeps its dense MLP.
    const int64_t d_ff = cfg.has_dense_mlp() ? cfg.d_ff : 0;
    bool ok = true;
    for (int64_t d : {tokens, int64_t(cfg.d_model), q, kv, d_ff}) ok = ok && d % 16 == 0;
    TRAINER_INPUT_CHECK(ok,
                        "{}: precision.compute: fp8 on run.device cuda needs train.micro_batch * "
                        "train.seq_len ({}), model.d_model ({}), model.n_head * head_dim ({}), "
                        "model.n_kv_head * head_dim ({}) and model.d_ff ({}) to be multiples of 16 "
                        "(the alignment of Hopper's FP8 GEMMs)",
                        spec.source_path, tokens, cfg.d_model, q, kv, cfg.d_ff);
    // MLA's GEMMs: its latents, kv_b's heads and o_proj's value heads.
    if (const model::MlaConfig& a = cfg.mla; a.enabled) {
      const int64_t kv_b = cfg.n_head * (a.qk_nope + a.v_dim), o = cfg.n_head * a.v_dim;
      bool mla_ok = true;
      for (int64_t d : {a.q_lora_rank, a.kv_lora_rank, a.kv_lora_rank + a.qk_rope, kv_b, o})
        mla_ok = mla_ok && d % 16 == 0;
      TRAINER_INPUT_CHECK(mla_ok,
                          "{}: precision.compute: fp8 on run.device cuda needs model.mla's "
                          "q_lora_rank ({}), kv_lora_rank ({}), kv_lora_rank + qk_rope_head_dim "
                          "({}), n_head * (qk_nope_head_dim + v_head_dim) ({}) and n_head * "
                          "v_head_dim ({}) to be multiples of 16 (the alignment of Hopper's FP8 GEMMs)",
                          spec.source_path, a.q_lora_rank, a.kv_lora_rank,
                          a.kv_lora_rank + a.qk_rope, kv_b, o);
    }
    // The experts' rows are ragged (padded on the way, fp8_pad_rows), their widths not.
    TRAINER_INPUT_CHECK(!cfg.moe_enabled || cfg.moe.d_ff_expert % 16 == 0,
                        "{}: precision.compute: fp8 on run.device cuda needs model.moe.d_ff_expert "
                        "({}) to be a multiple of 16 (the alignment of Hopper's FP8 GEMMs)",
                        spec.source_path, cfg.moe.d_ff_expert);
  }
  apply_device(cfg, spec, device);
  use_fused_attention(ctx_, cfg.fused_attention);
  cfg.tp_rank = mesh_->coords().tp;
  cfg.cp_rank = mesh_->coords().cp;
  cfg.moe.ep = shape.ep;
  cfg.moe.ep_rank = mesh_->coords().ep;
  apply_pipeline_stage(cfg, shape.pp, mesh_->coords().pp, shape.virtual_stages);
  // ZeRO shards over the gradient group; with ep > 1 the routed experts over
  // edp (zero_layout.h).
  const ZeroAxes axes = zero_axes(shape, spec.parallel.zero);
  zero_axis_ = axes.dense;
  const ZeroGroup dense_group{shape.size(axes.dense), mesh_->coords().along(axes.dense)};
  const ZeroGroup expert_group{shape.size(axes.expert), mesh_->coords().along(axes.expert)};
  apply_zero_sharding(cfg, spec.parallel.zero, axes, dense_group.size,
                      zero_double_buffers(shape, spec.parallel.zero, spec.parallel.zero_overlap));
  if (shape.pp > 1)
    pipeline_ = std::make_unique<PipelineRunner>(mesh_->comm(parallel::Axis::pp), accum_steps_,
                                                 shape.virtual_stages);
  model_ = std::make_unique<model::Model>(cfg, micro_batch_shape(spec));
  model_->set_tp_group(&mesh_->comm(parallel::Axis::tp));
  model_->set_ep_group(&mesh_->comm(parallel::Axis::ep));
  model_->set_cp_group(&mesh_->comm(parallel::Axis::cp));
  std::unique_ptr<parallel::Communicator> kv =
      parallel::make_kv_replica_group(*mesh_, model_->config().kv_replicas());
  if (kv) parallel::bind_compute_stream(*kv, ctx_);
  model_->set_kv_group(std::move(kv));
  model::Buffers& buf = model_->buffers();
  // ZeRO 1/2 shard the optimizer over the gradient group (dp, or dp x cp;
  // with ep > 1 the routed experts over edp, by unit part); the arenas are
  // padded so every shard has the same aligned size. zero 0 keeps the whole
  // state everywhere; zero 2 shards each parameter unit's gradients too,
  // zero 3 its values as well.
  ZeroLayout layout = zero_layout(buf, spec.parallel.zero, dense_group, expert_group);
  shard_ = layout.arena_shard;
  optimizer_ = std::make_unique<AdamW>(spec.optimizer, buf, std::move(layout));
  std::vector<std::pair<int, size_t>> slots;  // a pipeline stage's activation slots per chunk
  if (pipeline_) slots = activation_slot_plan(pipeline_->table(), *model_);
  plan_ = plan_memory(buf, *optimizer_, optimizer_->layout().arena_elems, 1, slots, ctx_.device);
  arenas_ = std::make_unique<Arenas>(plan_, buf, *optimizer_, ctx_);
  if (optimizer_->layout().shards_gradients()) {
    sharded_ = std::make_unique<ShardedParams>(*model_, *optimizer_, mesh_->comm(axes.dense),
                                               mesh_->comm(axes.expert), ctx_,
                                               arenas_->shard_staging());
    model_->set_block_param_hooks(sharded_.get());
    sharded_->init_parameters();  // zero 2: whole, as below
  } else {
    model_->init_parameters(ctx_);
  }
  if (options_.write_run_dir || options_.resume_read_only) {
    const parallel::Coords& c = mesh_->coords();
    // With cp > 1 the dp x cp group plays dp's part: parameters are written by
    // its rank 0, ZeRO shards by each of its ranks.
    const bool cp_in_dp = grad_axis_ == parallel::Axis::dp_cp;
    checkpoint::ShardPosition pos = checkpoint::shard_position(
        {.tp = c.tp, .dp = c.along(grad_axis_), .cp = cp_in_dp ? 0 : c.cp, .dp_size = grad_size_,
         .zero = spec.parallel.zero, .ep = c.ep, .ep_size = shape.ep, .edp = c.edp});
    checkpointer_ = std::make_unique<checkpoint::Checkpointer>(
        spec, mesh_->comm(parallel::Axis::world), ctx_.device, pos, mesh_->logs() ? stderr : nullptr);
    std::map<std::string, double> scalars;
    start_step_ = checkpointer_->resume(buf, *optimizer_, &scalars);
    samples_at_start_ = checkpointer_->resumed_samples();
    precision_->restore(scalars, checkpointer_->last_path());
    if (start_step_ == 0 && !spec.model.init_from.empty()) {
      if (checkpoint::is_checkpoint_source(spec.model.init_from)) {
        const std::string from = checkpointer_->init_weights(spec.model.init_from, buf, *optimizer_);
        if (options_.log)
          fmt::print(options_.log, "initialised from {}: its weights only (step, optimizer state "
                     "and data start afresh)\n", from);
      } else {
        checkpoint::load_hf_weights(spec.model.init_from, model_->config(), buf, ctx_, pos,
                                    optimizer_->layout().shards_parameters() ? optimizer_.get() : nullptr);
      }
    }
  }
  if (sharded_)
    sharded_->gather_whole_step();
  else
    model_->refresh_compute_weights(ctx_);
  buf.fp8_state_upload();  // the initial or resumed scales, into the plan's fp8 state
  norm_mem_ = device_alloc(ctx_.device, kArenaAlignment);
  // Partial norms (tp-split, replicated, a flag, routed experts).
  norm_out_ = Tensor(norm_mem_, {4}, DType::f32, ctx_.device);
  loss_sum_ = Tensor(static_cast<char*>(norm_mem_) + 4 * sizeof(float), {1}, DType::f64, ctx_.device);
  take_loss_sum();  // zeroes it
  if (shape.pp > 1 && cfg.tie_embeddings) {
    embedding_group_ = parallel::make_embedding_group(*mesh_, cfg.first_stage || cfg.last_stage);
    parallel::bind_compute_stream(*embedding_group_, ctx_);
  }

  if (shape.ep > 1 && !sharded_) {
    // Dense gradients over dp, routed experts over edp (parallel/expert_grad_sync.h).
    std::vector<parallel::KindedRange> ranges;
    for (const auto& p : buf.params()) {
      const model::BufferInfo& info = buf.buffers()[p.grad];
      ranges.push_back({{static_cast<int64_t>(info.offset / 4), static_cast<int64_t>(info.bytes / 4)},
                        p.spec.expert});
    }
    expert_reducer_ = std::make_unique<parallel::ExpertGradReducer>(
        grad_comm(), mesh_->comm(parallel::Axis::edp), shape.ep,
        flat_arena(model::Category::gradients), std::move(ranges));
  } else if (grad_size_ > 1 && spec.parallel.zero < 2) {
    // Buckets in the order backward finishes gradients: last parameter first.
    std::vector<parallel::GradRange> ranges;
    for (auto it = buf.params().rbegin(); it != buf.params().rend(); ++it) {
      const model::BufferInfo& info = buf.buffers()[it->grad];
      ranges.push_back({static_cast<int64_t>(info.offset / 4), static_cast<int64_t>(info.bytes / 4)});
    }
    reducer_ = std::make_unique<parallel::GradReducer>(
        grad_comm(), flat_arena(model::Category::gradients), ranges,
        options_.grad_bucket_bytes);
    // GPU: each bucket on the communication stream after an event on the
    // compute stream; the optimizer's stream waits for the last one.
    dp_overlap_ = std::make_unique<parallel::CommStreamOverlap>(
        ctx_, std::vector<parallel::Communicator*>{&grad_comm()});
    if (dp_overlap_->active()) {
      reducer_->set_before_reduce([this] { dp_overlap_->begin(); });
      reducer_->set_after_reduce([this] { dp_overlap_->join(); });
    }
    using Overlap = TrainerOptions::GradOverlap;
    // A pipeline's last backward of each chunk is spread over its table:
    // reduced after it. With tp > 1 the TP collectives of backward would run
    // on another NCCL communicator at the same time, which NCCL documents as
    // unsafe unless ordered: auto keeps the buckets after backward there (and
    // with cp > 1, whose attention exchanges keys and values in backward).
    const bool only_dp_in_backward = shape.tp == 1 && shape.cp == 1;
    reduce_in_backward_ = !pipeline_ && (options_.grad_overlap == Overlap::on ||
                                         (options_.grad_overlap == Overlap::auto_ &&
                                          device == Device::cuda && only_dp_in_backward));
  }

  if (!options_.synthetic_data) {
    const DataSpec& d = spec.data;
    // data.split: training reads part 0 of data.train, evaluation part 1.
    train_data_ = data::SampleSource::open(d.train, d.format, T, spec.model.vocab_size,
                                           spec.run.seed, d.shuffle, {d.split, 0});
    if (!d.val.empty() && spec.train.eval_every > 0)
      val_data_ = data::SampleSource::open(d.val, d.format, T, spec.model.vocab_size,
                                           spec.run.seed, false);
    else if (d.split_val() > 0 && spec.train.eval_every > 0)
      val_data_ = data::SampleSource::open(d.train, d.format, T, spec.model.vocab_size,
                                           spec.run.seed, false, {d.split, 1});
  }
  const int64_t local_tokens = model_->batch().tokens();  // B * T / cp
  host_tokens_.resize(static_cast<size_t>(T + 1));
  host_ids_.resize(static_cast<size_t>(local_tokens));
  host_targets_.resize(static_cast<size_t>(local_tokens));
  if (spec.data.documents()) {
    seq_doc_start_.resize(static_cast<size_t>(T));
    seq_positions_.resize(static_cast<size_t>(T));
  }
  if (model_->config().doc_masking) host_doc_start_.resize(static_cast<size_t>(local_tokens));
  if (model_->config().reset_positions) host_positions_.resize(static_cast<size_t>(local_tokens));
  uploader_ = std::make_unique<BatchUploader>(ctx_, 4 * static_cast<size_t>(local_tokens) * sizeof(int32_t));
  // MFU is logged by rank 0 alone, so on the CPU only it measures the GEMM
  // peak: every rank measuring at once on shared cores cost each launch of a
  // 4-rank debug job 0.3 s of its 0.8 (and measured the contention, not the cores).
  if (ctx_.device != Device::cpu || mesh_->logs()) peak_flops_ = peak_flops(ctx_, spec.precision.compute);
  // The first step's samples and the first evaluation batch are read now: a
  // token id outside the vocabulary there (a wrong model.vocab_size, another
  // tokenizer's data) is refused before anything is written. Later samples are
  // checked as they are drawn (scanning a whole corpus would read terabytes).
  if (train_data_)
    for (int64_t i = 0; i < batches_->batch_at(consumed_before(start_step_ + 1)) / dp_size_; ++i)
      train_data_->get(first_sample(start_step_ + 1) + i, host_tokens_.data());
  if (val_data_)
    for (int64_t i = 0; i < spec.train.micro_batch; ++i)
      val_data_->get(int64_t(dp_rank_ % spec.train.eval_batches) * spec.train.micro_batch + i,
                     host_tokens_.data());

  if (options_.write_run_dir && mesh_->logs()) {
    fs::create_directories(spec.run.dir);
    write_resolved_spec(spec, (fs::path(spec.run.dir) / "job.yaml").string());
    if (spec.log.metrics != "none") {  // jsonl, tensorboard
      std::string path = (fs::path(spec.run.dir) / "metrics.jsonl").string();
      drop_metrics_after(path, start_step_);
      metrics_ = std::fopen(path.c_str(), "a");
      TRAINER_INPUT_CHECK(metrics_ != nullptr, "{}: cannot open for appending", path);
    }
    if (spec.log.metrics == "tensorboard")
      tensorboard_ = std::make_unique<TensorBoardMetrics>(spec.run.dir);
  }
  if (options_.log) {
    const std::string transport = mesh_->transport();
    fmt::print(options_.log, "mesh: {}, zero {}{}\n", shape.str(), spec.parallel.zero,
               transport.empty() ? "" : ", collectives over " + transport);
    fmt::print(options_.log, "model: {} params ({} layers, d_model {}, {} heads), device {}\n",
               plan_.num_params, spec.model.n_layer, spec.model.d_model, spec.model.n_head,
               device_name(ctx_.device));
    fmt::print(options_.log, "memory plan (per rank):\n{}", plan_.describe());
    if (pipeline_)
      fmt::print(options_.log, "{}\n", parallel::describe_schedule(shape.pp, accum_steps_, shape.virtual_stages));
    if (const auto& ramp = spec.train.rampup_batch_size)
      fmt::print(options_.log,
                 "batch ramp: global batch {} rising by {} over the first {} samples to {} "
                 "(train.rampup_batch_size; this run starts at {})\n",
                 ramp->start, ramp->increment, ramp->samples, spec.train.global_batch,
                 batches_->batch_at(consumed_before(start_step_ + 1)));
    if (train_data_) fmt::print(options_.log, "train data: {}\n", train_data_->describe());
    if (val_data_) fmt::print(options_.log, "val data: {}\n", val_data_->describe());
    if (start_step_ > 0) {
      fmt::print(options_.log, "resumed from {} after step {} ({} samples consumed)\n",
                 checkpointer_->last_path(), start_step_, samples_at_start_);
      for (const std::string& note : checkpointer_->resume_notes())
        fmt::print(options_.log, "note: {}\n", note);
    }
    std::fflush(options_.log);
  }
}

std::string Trainer::resumed_from() const {
  return checkpointer_ && start_step_ > 0 ? checkpointer_->last_path() : std::string();
}

Tensor Trainer::flat_arena(model::Category category) const {
  const model::Buffers& buf = model_->buffers();
  const auto& first = buf.params().front();
  Tensor t = buf.get(category == model::Category::parameters ? first.value : first.grad);
  int64_t n = static_cast<int64_t>(plan_.category[static_cast<int>(category)] / sizeof(float));
  return Tensor(t.data, {n}, DType::f32, ctx_.device);
}

Trainer::~Trainer() {
  // The mesh may outlive this trainer and its streams.
  for (parallel::Axis axis : parallel::kAllAxes) parallel::unbind_compute_stream(mesh_->comm(axis));
  if (metrics_) std::fclose(metrics_);
  device_free(ctx_.device, norm_mem_);
}

void Trainer::load_micro_batch(const data::SampleSource* source, int64_t first_sample, int chunk) {
  const int B = spec_.train.micro_batch;
  for (int b = 0; b < B; ++b) read_sequence(source, first_sample + b, b);
  // A pipeline stage reads ids only with the embedding, targets only with the
  // head; every chunk keeps its own copy of the document layout.
  BatchUploader::Part parts[4];
  int n = 0;
  if (model_->has_embedding(chunk)) parts[n++] = {model_->input_ids(), host_ids_.data()};
  if (model_->has_head(chunk)) parts[n++] = {model_->targets(), host_targets_.data()};
  if (Tensor d = model_->doc_start(chunk); !d.empty()) parts[n++] = {d, host_doc_start_.data()};
  if (Tensor p = model_->positions(chunk); !p.empty()) parts[n++] = {p, host_positions_.data()};
  uploader_->upload({parts, static_cast<size_t>(n)});
}

int64_t Trainer::read_sequence(const data::SampleSource* source, int64_t sample, int b) {
  const int T = spec_.train.seq_len;
  if (source) {
    source->get(sample, host_tokens_.data());
  } else {  // synthetic: tokens are a pure function of (seed, sample, position)
    const uint64_t V = static_cast<uint64_t>(spec_.model.vocab_size);
    for (int t = 0; t <= T; ++t)
      host_tokens_[t] = static_cast<int32_t>(
          model::counter_bits(spec_.run.seed, uint64_t(sample), uint64_t(t)) % V);
  }
  const DataSpec& d = spec_.data;
  if (d.documents())
    document_layout(host_tokens_.data(), T, *d.eod_token, seq_doc_start_.data(),
                    seq_positions_.data());
  return keep_local_tokens(b);
}

int64_t Trainer::keep_local_tokens(int b) {
  // Context parallelism: every cp rank of a dp rank reads the same sequences
  // and keeps its two chunks of them (parallel/cp_layout.h); the targets are
  // the next tokens of the same global positions, the document layout that
  // of those positions.
  const model::BatchShape& batch = model_->batch();
  const parallel::CpLayout layout = model::cp_layout(model_->config(), batch);
  const DataSpec& d = spec_.data;
  int64_t masked = 0;
  auto keep = [&](int64_t to, int64_t from, int64_t n) {
    std::copy_n(host_tokens_.begin() + from, n, host_ids_.begin() + to);
    std::copy_n(host_tokens_.begin() + from + 1, n, host_targets_.begin() + to);
    if (!host_doc_start_.empty())
      std::copy_n(seq_doc_start_.begin() + from, n, host_doc_start_.begin() + to);
    if (!host_positions_.empty())
      std::copy_n(seq_positions_.begin() + from, n, host_positions_.begin() + to);
    if (d.eod_mask_loss)
      masked += mask_eod_targets(host_ids_.data() + to, host_targets_.data() + to, n, *d.eod_token);
  };
  if (layout.cp == 1) {
    keep(b * batch.T, 0, batch.T);
  } else {
    for (int j = 0; j < parallel::CpLayout::kLocalChunks; ++j)
      keep(b * batch.T + j * layout.chunk(), layout.offset(j), layout.chunk());
  }
  return masked;
}

double Trainer::masked_targets(const data::SampleSource* source, int64_t first, int64_t count) {
  double masked = 0;
  for (int64_t i = 0; i < count; ++i) masked += double(read_sequence(source, first + i, 0));
  return masked;
}

double Trainer::counted_targets(double all, double masked_here, const std::string& batch) {
  const double counted = all - parallel::group_sum(grad_comm(), masked_here);
  TRAINER_INPUT_CHECK(counted > 0, "data.eod_mask_loss: every target of {} follows an end of document "
                      "(data.eod_token {}): no loss to average", batch, *spec_.data.eod_token);
  return counted;
}

void Trainer::await_device() {
  if (mesh_->shape().world > 1) parallel::wait_for_device(ctx_);
}

void Trainer::add_micro_batch_loss() { sum_values(ctx_, loss_sum_, model_->losses(ctx_)); }

double Trainer::take_loss_sum() {
  double sum = 0;
  await_device();
  copy_to_host(&sum, loss_sum_);
  fill(ctx_, loss_sum_, 0.0f);  // queued: no second wait for the device
  return sum;
}

std::vector<Tensor> Trainer::owned_gradients() const {
  if (sharded_) return {optimizer_->grad_shards()};
  return {flat_arena(model::Category::gradients)};
}

double Trainer::global_norm(bool params) {
  // Partial sums: parameters split over tp (each rank holds other elements),
  // replicated ones (each tp rank holds the same values) and, in slot 3,
  // routed experts (each ep rank holds other experts).
  fill(ctx_, norm_out_, 0.0f);
  const model::Buffers& buf = model_->buffers();
  for (int i = 0; i < static_cast<int>(buf.params().size()); ++i) {
    const model::Buffers::Param& p = buf.params()[i];
    if (p.spec.tied_copy) continue;  // counted on the first stage
    // A replicated KV head (its gradient summed over its replicas): its first replica counts it.
    if (model_->config().tp_rank % p.spec.tp_replicas != 0) continue;
    Tensor g;
    if (sharded_) {  // zero 2/3: its part of this rank's gradient (parameter) shard
      const OwnedPart o = optimizer_->owned(i);
      if (o.empty()) continue;
      g = (params ? optimizer_->param_shards() : optimizer_->grad_shards()).slice(o.state_at, o.state_at + o.size());
    } else {
      g = buf.get(params ? p.value : p.grad);
      g = g.view({g.numel()});
    }
    // Routed experts under ep: each ep rank holds other experts (slot 3).
    int k = p.spec.expert ? 3 : p.spec.tp_dim >= 0 ? 0 : 1;
    sum_of_squares(ctx_, norm_out_.slice(k, k + 1), g);
  }
  float sq[4] = {0, 0, 0, 0};
  await_device();
  copy_to_host(sq, norm_out_);
  // Zero 2/3 with ep: the expert shards partition each ep rank's experts
  // over edp, and ep x edp is the dense group (dp x cp) summed over below.
  const double experts =
      sharded_ ? sq[3] : parallel::group_sum(mesh_->comm(parallel::Axis::ep), sq[3]);
  double total = parallel::group_sum(mesh_->comm(parallel::Axis::tp), sq[0]) + sq[1] + experts;
  if (sharded_) total = parallel::group_sum(mesh_->comm(zero_axis_), total);
  if (pipeline_) total = parallel::group_sum(mesh_->comm(parallel::Axis::pp), total);
  return std::sqrt(total);
}

void Trainer::sync_tied_table() {
  // Megatron's embedding group: the first stage's table and the last stage's
  // copy get the sum of both gradients, so both take the same update. Middle
  // stages hold neither and are not in the group.
  if (!embedding_group_) return;
  const model::ModelConfig& cfg = model_->config();
  if (!cfg.first_stage && !cfg.last_stage) return;
  Tensor g = model_->tied_table_grad();
  TRAINER_CHECK(!g.empty(), "pipeline stage {}: tied embeddings without the table's gradient",
                mesh_->coords().pp);
  embedding_group_->all_reduce(g, parallel::ReduceOp::sum);
}

void Trainer::synchronize_gradients() {
  if (sharded_) {  // zero 2/3: the blocks' were reduce-scattered during backward
    cuda::NvtxRange range("gradient sync");
    sharded_->reduce_whole_step();
    return;
  }
  if (grad_size_ == 1) return;
  cuda::NvtxRange range("gradient sync");
  if (expert_reducer_) {
    expert_reducer_->reduce_all(ctx_);
  } else {
    TRAINER_CHECK(reducer_, "zero {}: no gradient reduction over {} ranks", spec_.parallel.zero,
                  grad_size_);
    reducer_->reduce_all();
  }
}

// The data continues after the samples the resumed checkpoint consumed (its
// global batch may have been another), as the checkpoints record it.
int64_t Trainer::consumed_before(int step) const {
  return checkpoint::samples_consumed_after(step - 1, start_step_, samples_at_start_, *batches_);
}

int64_t Trainer::first_sample(int step) const {
  const int64_t consumed = consumed_before(step);
  return consumed + int64_t(dp_rank_) * (batches_->batch_at(consumed) / dp_size_);
}

PipelineRunner& Trainer::pipeline_for(int micro_batches) {
  if (micro_batches == accum_steps_) return *pipeline_;
  std::unique_ptr<PipelineRunner>& runner = ramp_pipelines_[micro_batches];
  if (!runner) {
    runner = std::make_unique<PipelineRunner>(mesh_->comm(parallel::Axis::pp), micro_batches,
                                              mesh_->shape().virtual_stages);
    // A 1F1B table never holds more in flight for fewer micro-batches (tested
    // for every layout up to pp 8); this would say so if one did.
    const int chunks = mesh_->shape().virtual_stages;
    const std::vector<int> need = chunk_slots(runner->table(), chunks),
                           have = chunk_slots(pipeline_->table(), chunks);
    for (int c = 0; c < chunks; ++c)
      TRAINER_CHECK(need[c] <= have[c], "pipeline: {} micro-batches need {} activation slots of chunk "
                    "{}, the plan (for {}) has {}", micro_batches, need[c], c, accum_steps_, have[c]);
  }
  return *runner;
}

StepRecord Trainer::train_step(int step) {
  // log.profile_steps' range around whole steps (`train` and `bench` alike),
  // and each step an NVTX range; neither counts in the step's time.
  profile_->before_step(step);
  StepRecord r;
  {
    cuda::NvtxRange range(fmt::format("step {}", step).c_str());
    r = run_step(step);
  }
  profile_->after_step(step, step == spec_.train.steps);
  return r;
}

StepRecord Trainer::run_step(int step) {
  auto t0 = std::chrono::steady_clock::now();
  StepTimers& timers = *timers_;
  timers.begin_step();
  const int B = spec_.train.micro_batch, T = spec_.train.seq_len;
  const int G = batches_->batch_at(consumed_before(step));
  const int micro_batches = G / (B * dp_size_);
  const double tokens = double(G) * T;
  const int64_t rank_first = first_sample(step);
  model_->zero_grads(ctx_);
  if (sharded_) sharded_->zero_grads();
  model_->reset_moe_stats(ctx_);
  double loss_sum = 0;
  timers.mark(StepPhase::forward_backward);
  // Gradients are averaged over the gradient group (dp, or dp x cp), so each
  // rank's backward is scaled up by its size: the average is then the sum over
  // all tokens / tokens. fp16 also multiplies by the loss scale, divided out of
  // the gradients below.
  // data.eod_mask_loss: the average is over the targets not masked, in
  // the whole global batch; MoE aux losses keep their per-token weight.
  const double counted =
      spec_.data.eod_mask_loss
          ? counted_targets(tokens, masked_targets(train_data_.get(), rank_first, G / dp_size_),
                            fmt::format("step {}'s batch", step))
          : tokens;
  timers.mark(StepPhase::data);
  const float loss_scale = precision_->loss_scale();
  const float dloss = static_cast<float>(grad_size_ / counted) * loss_scale;
  const float aux_dloss = static_cast<float>(grad_size_ / tokens) * loss_scale;
  // What ran before a load was forward-backward (or the step's start).
  auto load = [&](int m, int chunk) {
    timers.mark(StepPhase::forward_backward);
    load_micro_batch(train_data_.get(), rank_first + int64_t(m) * B, chunk);
    timers.mark(StepPhase::data);
  };
  if (pipeline_) {
    pipeline_for(micro_batches).run_step(*model_, ctx_, *arenas_, load, [&] { add_micro_batch_loss(); },
                                         dloss, aux_dloss);
  } else {
    const int P = static_cast<int>(model_->buffers().params().size());
    for (int m = 0; m < micro_batches; ++m) {
      load(m, 0);
      model_->forward(ctx_);
      add_micro_batch_loss();
      // The reducer's tensors are the parameters in reverse (backward) order.
      if (reduce_in_backward_ && m == micro_batches - 1)
        model_->set_grad_ready([this, P](int p) { reducer_->mark_ready(P - 1 - p); });
      model_->backward(ctx_, dloss, 0, aux_dloss);
      model_->set_grad_ready({});
    }
  }
  loss_sum = take_loss_sum();  // non-zero on the last pipeline stage only
  timers.mark(StepPhase::forward_backward);
  model_->finish_gradients(ctx_);
  sync_tied_table();
  synchronize_gradients();
  StepRecord r;
  r.step = step;
  if (batches_->ramps()) r.global_batch = G;
  r.loss = parallel::group_sum(grad_comm(), loss_sum) / counted;  // every token once
  if (pipeline_) r.loss = parallel::group_sum(mesh_->comm(parallel::Axis::pp), r.loss);
  finish_moe_step(r, G);
  MixedPrecision::finish_fp8_step(ctx_, model_->buffers(), *mesh_);
  timers.mark(StepPhase::grad_sync);
  r.lr = learning_rate(spec_.optimizer, spec_.train.steps, step);
  if (precision_->loss_scaling()) r.loss_scale = loss_scale;
  r.skipped = precision_->overflowed(ctx_, norm_out_.slice(2, 3), owned_gradients(), *mesh_);
  if (r.skipped) {
    r.grad_norm = std::nan("");
  } else {
    r.grad_norm = grad_norm() / loss_scale;
    double clip = spec_.optimizer.grad_clip;
    float grad_scale = 1.0f / loss_scale;
    if (clip > 0 && r.grad_norm > clip) grad_scale *= static_cast<float>(clip / r.grad_norm);
    cuda::NvtxRange range("optimizer step");
    optimizer_->step(ctx_, step, static_cast<float>(r.lr), grad_scale);
    if (sharded_) {  // zero 3: blocks are gathered when they run, the rest now; zero 2: all
      sharded_->gather_whole_step();
    } else {
      // A sharded update: every rank needs all parameters back.
      const ZeroLayout& layout = optimizer_->layout();
      if (layout.by_unit_parts())
        gather_updated_parts(layout, flat_arena(model::Category::parameters),
                             mesh_->comm(zero_axis_), mesh_->comm(parallel::Axis::edp));
      else if (shard_.shard != shard_.padded)
        parallel::zero_all_gather(mesh_->comm(zero_axis_),
                                  flat_arena(model::Category::parameters), shard_);
      model_->refresh_compute_weights(ctx_);
    }
  }
  if (spec_.log.params_norm) r.params_norm = global_norm(true);
  timers.mark(StepPhase::optimizer);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (timers.on()) r.times = timers.spread(mesh_->comm(parallel::Axis::world));
  r.tokens_per_s = tokens / r.seconds;
  double flops = model_->flops_per_token() * r.tokens_per_s;
  r.tflops = flops / 1e12;
  // CPU: a step beating the quick start-up peak (a smaller GEMM, perhaps on
  // loaded cores) measures the 2048 one `trainer bench` uses.
  if (ctx_.device == Device::cpu && peak_flops_ > 0)
    peak_flops_ = refine_cpu_peak(peak_flops_, flops / mesh_->shape().world, peak_remeasures_,
                                  [this] { return measure_gemm_flops(ctx_, 2048); });
  r.mfu = peak_flops_ > 0 ? flops / (peak_flops_ * mesh_->shape().world) : 0.0;
  if (mesh_->logs()) {  // rank 0's is the one logged (and benched); others skip the syscall
    const MemoryInUse mem = memory_in_use(ctx_.device);
    r.memory_bytes = double(mem.used);
    r.memory_total = double(mem.total);
  }
  history_.push_back(r);
  return r;
}

void Trainer::finish_moe_step(StepRecord& r, int global_batch) {
  // Every pipeline stage takes part (one may hold no MoE layer).
  if (!model_->config().moe_enabled) return;
  std::vector<const model::Moe*> layers = model_->moe_layers();
  parallel::Communicator& dp = mesh_->comm(parallel::Axis::dp);
  // Every layer's step counters and aux-loss sum, gathered on the device: one
  // all-reduce and one read here, not one of each per layer.
  double aux_sum = 0, seq_aux_sum = 0, imbalance = 0, dropped = 0;
  const int64_t L = static_cast<int64_t>(layers.size()), E = model_->config().moe.n_experts;
  Tensor summary = model_->gather_moe_step(ctx_);
  if (L > 0) {
    // Expert loads summed over dp, so every replica sees (and biases by) the
    // same numbers. The aux-loss sums stay per rank (summed over dp below).
    Tensor counts = summary.slice(0, L * 2 * E);
    if (dp.size() > 1) dp.all_reduce(counts, parallel::ReduceOp::sum);
    std::vector<float> host(static_cast<size_t>(summary.numel()));
    copy_to_host(host.data(), summary);
    for (int64_t i = 0; i < L; ++i) {
      seq_aux_sum += host[L * 2 * E + L + i];
      aux_sum += host[L * 2 * E + i] + host[L * 2 * E + L + i];
    }
    const std::vector<int> units = model_->moe_layer_units();
    for (int64_t i = 0; i < L; ++i) {
      const model::Moe* m = layers[i];
      model::MoeStats st = model::Moe::stats_of(host.data() + i * 2 * E, E);
      imbalance = std::max(imbalance, st.imbalance);
      dropped += static_cast<double>(st.dropped);
      auto update = [&] {
        m->update_bias(ctx_, model_->buffers(), static_cast<float>(spec_.model.moe.bias_update_rate),
                       counts.slice(i * 2 * E, i * 2 * E + E));
      };
      // aux_free's bias is a parameter: under zero 3 it lives in the shards.
      if (sharded_ && m->selection_bias().index >= 0)
        sharded_->update_outside_optimizer(units[i], update);
      else
        update();
    }
  }
  if (pipeline_) {  // the logging rank holds the first stage's layers only
    parallel::Communicator& pp = mesh_->comm(parallel::Axis::pp);
    aux_sum = parallel::group_sum(pp, aux_sum);
    seq_aux_sum = parallel::group_sum(pp, seq_aux_sum);
    dropped = parallel::group_sum(pp, dropped);
    pp.all_reduce(Tensor(&imbalance, {1}, DType::f64), parallel::ReduceOp::max);
  }
  const double micro_batches = global_batch / spec_.train.micro_batch;
  r.moe_aux_loss = parallel::group_sum(dp, aux_sum) / micro_batches;
  if (spec_.model.moe.seq_aux_loss_coeff > 0)
    r.moe_seq_aux_loss = parallel::group_sum(dp, seq_aux_sum) / micro_batches;
  r.moe_imbalance = imbalance;
  r.moe_dropped = dropped;
  // Each ep group sees its own peak; every rank (every stage) takes part.
  if (mesh_->shape().ep > 1 && !spec_.model.moe.capacity_factor) {
    double peak = 0;
    for (const model::Moe* m : layers) peak = std::max(peak, m->ep_recv_peak());
    mesh_->comm(parallel::Axis::world)
        .all_reduce(Tensor(&peak, {1}, DType::f64), parallel::ReduceOp::max);
    r.moe_ep_recv_peak = peak;
  }
}

bool Trainer::lockstep_forwards() const {
  return mesh_->shape().ep > 1 || optimizer_->layout().shards_parameters();
}

double Trainer::evaluate_pipeline() {
  // Forward only, one micro-batch at a time down the stages.
  const int B = spec_.train.micro_batch;
  parallel::Communicator& pp = mesh_->comm(parallel::Axis::pp);
  const int E = spec_.train.eval_batches, rounds = (E + dp_size_ - 1) / dp_size_;
  for (int k = 0; k < rounds; ++k) {
    const int i = dp_rank_ + k * dp_size_;  // see evaluate()
    if (i >= E && !lockstep_forwards()) break;
    pipeline_->run_forward(
        *model_, ctx_, *arenas_,
        [&](int chunk) { load_micro_batch(val_data_.get(), int64_t(i % E) * B, chunk); },
        [&] {
          if (i < E) add_micro_batch_loss();
        });
  }
  double sum = take_loss_sum();  // non-zero on the last stage only
  sum = parallel::group_sum(grad_comm(), sum);  // cp ranks hold other tokens of the same batches
  sum = parallel::group_sum(pp, sum);
  return sum / counted_eval_targets();
}

double Trainer::counted_eval_targets() {
  const int B = spec_.train.micro_batch, T = spec_.train.seq_len, E = spec_.train.eval_batches;
  const double all = double(E) * B * T;
  if (!spec_.data.eod_mask_loss) return all;
  double masked = 0;  // over this dp rank's batches (see evaluate())
  for (int i = dp_rank_; i < E; i += dp_size_) masked += masked_targets(val_data_.get(), int64_t(i) * B, B);
  return counted_targets(all, masked, "the validation batches");
}

double Trainer::evaluate() {
  if (!val_data_) return std::nan("");
  if (pipeline_) return evaluate_pipeline();
  const int B = spec_.train.micro_batch;
  // With ep the ranks of an ep group exchange tokens in every MoE forward
  // (zero 3: the dp group gathers every block), so all run the same number
  // of forwards: a rank past the last batch repeats one and does not count it.
  const int E = spec_.train.eval_batches, rounds = (E + dp_size_ - 1) / dp_size_;
  for (int k = 0; k < rounds; ++k) {
    const int i = dp_rank_ + k * dp_size_;
    if (i >= E && !lockstep_forwards()) break;
    load_micro_batch(val_data_.get(), int64_t(i % E) * B);
    model_->forward(ctx_);
    if (i < E) add_micro_batch_loss();
  }
  double sum = take_loss_sum();
  sum = parallel::group_sum(grad_comm(), sum);
  return sum / counted_eval_targets();
}

namespace {

// JSON has no inf or NaN: such a value is written as null.
std::string json_number(double v, const char* spec) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : std::string("null");
}

}  // namespace

// Without loss scaling (fp32, bf16, fp8) nothing skips a step: an inf or NaN
// loss or gradient norm means the run diverged (or its initialisation
// overflows), and AdamW would go on with clipped-to-zero or NaN updates.
// Every rank holds the same reduced values, so all stop together. A step fp16
// skipped for overflow is the scaler's business.
void Trainer::check_finite(const StepRecord& r) const {
  if (r.skipped) return;
  if (std::isfinite(r.loss) && std::isfinite(r.grad_norm)) return;
  const std::string what = !std::isfinite(r.loss)
                               ? fmt::format("loss is {}", r.loss)
                               : fmt::format("gradient norm is {} (loss {:.6g})", r.grad_norm, r.loss);
  const std::string last = checkpointer_ && !checkpointer_->last_path().empty()
                               ? fmt::format("; the last checkpoint is {}", checkpointer_->last_path())
                               : std::string();
  throw Error(fmt::format("step {}: {}: the run diverged{}", r.step, what, last));
}

namespace {
// "2.31 GiB (2.9%)": a rank's memory and its share of the device (or machine).
std::string memory_text(const StepRecord& r) {
  if (r.memory_total <= 0) return "?";
  return fmt::format("{} ({:.1f}%)", format_bytes(r.memory_bytes), 100.0 * r.memory_bytes / r.memory_total);
}
}  // namespace

void Trainer::log_step(const StepRecord& r) {
  if (options_.log && (r.step % spec_.train.log_every == 0 || r.step == 1 || r.skipped ||
                       r.step == spec_.train.steps)) {
    std::string extra;  // MoE and loss-scale fields, when the job has them
    if (!std::isnan(r.moe_imbalance))
      extra = fmt::format(" | moe aux {:.4f}{} imbalance {:.2f} dropped {:.0f}", r.moe_aux_loss,
                          std::isnan(r.moe_seq_aux_loss)
                              ? std::string()
                              : fmt::format(" (seq {:.4f})", r.moe_seq_aux_loss),
                          r.moe_imbalance, r.moe_dropped);
    if (!std::isnan(r.moe_ep_recv_peak))
      extra += fmt::format(" ep recv {:.2f}x of {:g}x", r.moe_ep_recv_peak,
                           spec_.model.moe.ep_recv_headroom);
    if (!std::isnan(r.loss_scale)) extra += fmt::format(" | loss scale {:g}", r.loss_scale);
    if (r.global_batch > 0) extra += fmt::format(" | batch {}", r.global_batch);
    if (!std::isnan(r.params_norm)) extra += fmt::format(" | params norm {:.4f}", r.params_norm);
    if (r.skipped)
      extra += fmt::format(" | SKIPPED: inf/NaN gradients, loss scale now {:g} ({} skipped so far)",
                         precision_->loss_scale(), precision_->skipped_steps());
    fmt::print(options_.log,
               "step {:>5}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.4f} | {:.0f} tok/s | "
               "{:.2f} GFLOP/s | mfu {:.1f}% | {:.0f} ms | mem {}{}\n",
               r.step, spec_.train.steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s,
               r.tflops * 1e3, r.mfu * 100, r.seconds * 1e3, memory_text(r), extra);
    if (r.times) {
      std::string line;
      for (int p = 0; p < kStepPhases; ++p) {
        const PhaseSpread& s = (*r.times)[p];
        line += fmt::format("{}{} {:.2f} (rank {}) / {:.2f} (rank {})", p ? " | " : "",
                            step_phase_name(StepPhase(p)), s.min_ms, s.min_rank, s.max_ms,
                            s.max_rank);
      }
      fmt::print(options_.log, "      timers ms, min / max over {} ranks: {}\n",
                 mesh_->shape().world, line);
    }
    std::fflush(options_.log);
  }
  if (metrics_) {
    std::string extra;  // batch, MoE and loss-scale fields, when the job has them
    if (r.global_batch > 0) extra = fmt::format(", \"global_batch\": {}", r.global_batch);
    if (!std::isnan(r.params_norm)) extra += fmt::format(", \"params_norm\": {}", json_number(r.params_norm, "{:.9g}"));
    if (!std::isnan(r.moe_imbalance))
      extra += fmt::format(", \"moe_aux_loss\": {}, \"moe_imbalance\": {}, \"moe_dropped\": {}",
                          json_number(r.moe_aux_loss, "{:.9g}"),
                          json_number(r.moe_imbalance, "{:.6g}"), json_number(r.moe_dropped, "{:.0f}"));
    if (!std::isnan(r.moe_seq_aux_loss))
      extra += fmt::format(", \"moe_seq_aux_loss\": {}", json_number(r.moe_seq_aux_loss, "{:.9g}"));
    if (!std::isnan(r.moe_ep_recv_peak))
      extra += fmt::format(", \"moe_ep_recv_peak\": {}", json_number(r.moe_ep_recv_peak, "{:.6g}"));
    if (!std::isnan(r.loss_scale))
      extra += fmt::format(", \"loss_scale\": {}, \"skipped\": {}", json_number(r.loss_scale, "{:g}"),
                           r.skipped);
    if (r.times) {
      extra += ", \"timers_ms\": {";
      for (int p = 0; p < kStepPhases; ++p) {
        const PhaseSpread& s = (*r.times)[p];
        extra += fmt::format("{}\"{}\": {{\"min\": {}, \"min_rank\": {}, \"max\": {}, \"max_rank\": {}}}",
                             p ? ", " : "", step_phase_name(StepPhase(p)),
                             json_number(s.min_ms, "{:.4g}"), s.min_rank,
                             json_number(s.max_ms, "{:.4g}"), s.max_rank);
      }
      extra += "}";
    }
    fmt::print(metrics_,
               "{{\"step\": {}, \"loss\": {}, \"lr\": {}, \"grad_norm\": {}, "
               "\"tokens_per_s\": {}, \"tflops\": {}, \"mfu\": {}, \"memory_bytes\": {}{}}}\n",
               r.step, json_number(r.loss, "{:.9g}"), json_number(r.lr, "{:.9g}"),
               json_number(r.grad_norm, "{:.9g}"), json_number(r.tokens_per_s, "{:.6g}"),
               json_number(r.tflops, "{:.6g}"), json_number(r.mfu, "{:.6g}"),
               r.memory_bytes > 0 ? fmt::format("{:.0f}", r.memory_bytes) : std::string("null"), extra);
    std::fflush(metrics_);
  }
  if (tensorboard_) tensorboard_->log_step(r);
}

void Trainer::log_eval(int step, double val_loss) {
  if (options_.log) {
    fmt::print(options_.log, "step {:>5}/{} | val loss {:.4f}\n", step, spec_.train.steps,
               val_loss);
    std::fflush(options_.log);
  }
  if (metrics_) {
    fmt::print(metrics_, "{{\"step\": {}, \"val_loss\": {}}}\n", step,
               json_number(val_loss, "{:.9g}"));
    std::fflush(metrics_);
  }
  if (tensorboard_) tensorboard_->log_eval(step, val_loss);
}

void Trainer::log_saved(const std::string& path, bool background) {
  if (path.empty() || !options_.log) return;
  if (background)
    fmt::print(options_.log, "saved checkpoint {} (written in the background in {:.2f} s)\n", path,
               checkpointer_->last_write_seconds());
  else
    fmt::print(options_.log, "saved checkpoint {}\n", path);
  std::fflush(options_.log);
}

int Trainer::run() {
  TRAINER_CHECK(!options_.resume_read_only, "Trainer::run: a read-only trainer (evaluate) never trains");
  install_stop_handlers();
  int done = start_step_;
  for (int step = start_step_ + 1; step <= spec_.train.steps; ++step) {
    StepRecord r = train_step(step);
    log_step(r);  // the diverged step too, so metrics.jsonl shows it
    check_finite(r);
    done = step;
    bool last = step == spec_.train.steps;
    if (val_data_ && spec_.train.eval_every > 0 && (step % spec_.train.eval_every == 0 || last))
      log_eval(step, evaluate());
    // Every rank must agree to stop at the same step, or the save would hang:
    // one sum counts the ranks asked by a signal (units) and those past
    // train.max_minutes (millions; fewer than a million ranks).
    const double minutes =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count() / 60;
    const bool over_time = spec_.train.max_minutes && minutes >= *spec_.train.max_minutes;
    const double asked = parallel::group_sum(mesh_->comm(parallel::Axis::world),
                                             (stop_requested() ? 1 : 0) + (over_time ? 1e6 : 0));
    const bool stop = asked > 0, timed_out = asked >= 1e6;
    const bool save = checkpointer_ && (checkpointer_->due(step) || last || stop);
    // A background save is completed at the first step boundary where every
    // rank's shard is written (a collective only while one is in flight).
    if (checkpointer_ && !save) log_saved(checkpointer_->poll(), true);
    if (save) {
      std::map<std::string, double> scalars;
      precision_->save(scalars);
      await_device();  // multi-GPU ranks poll before a host copy
      model_->buffers().fp8_state_to_host();  // as the step left it, and evaluation forwards' amaxes
      // The last save of a run is written in the foreground: the run ends
      // with it, and a Slurm time limit waits for no thread.
      const bool background = spec_.checkpoint.async && !last && !stop;
      log_saved(checkpointer_->finish(), true);  // one in flight at most: wait for it
      checkpointer_->save(step, model_->buffers(), *optimizer_, scalars, background);
      if (background) {
        if (options_.log)
          fmt::print(options_.log, "saving checkpoint {} in the background (host snapshot {}, {} "
                     "bytes, on rank 0)\n", checkpoint::step_dir_name(step),
                     format_bytes(static_cast<double>(checkpointer_->pending_bytes())),
                     checkpointer_->pending_bytes());
      } else {
        log_saved(checkpointer_->last_path(), false);
      }
    }
    if (stop && !last) {
      if (options_.log)
        fmt::print(options_.log, "stopped after step {} on {}\n", step,
                   stop_signal()  ? fmt::format("signal {}", stop_signal())
                   : !timed_out   ? std::string("a signal another rank received")
                                  : fmt::format("train.max_minutes ({}; {:.3g} since start)",
                                                *spec_.train.max_minutes, minutes));
      break;
    }
  }
  return done;
}

}  // namespace trainer::engine
