// Trainer: the training loop of one rank. Builds the model from the spec,
// allocates the memory plan, opens the data, and runs optimizer steps with
// gradient accumulation, clipping, LR schedule, evaluation and logging.
#pragma once

#include <cmath>
#include <cstdio>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/batch_schedule.h"
#include "engine/config/job_spec.h"
#include "engine/device.h"
#include "engine/memory_plan.h"
#include "engine/mixed_precision.h"
#include "engine/optimizer.h"
#include "engine/pipeline_runner.h"
#include "engine/profile_window.h"
#include "engine/sharded_params.h"
#include "engine/step_timers.h"
#include "kernels/batch_upload.h"
#include "model/model.h"
#include "parallel/expert_grad_sync.h"
#include "parallel/grad_sync.h"
#include "parallel/mesh.h"
#include "parallel/stream_order.h"

namespace trainer::engine {

namespace data {
class SampleSource;
}
namespace checkpoint {
class Checkpointer;
}
class TensorBoardMetrics;

struct StepRecord {
  int step = 0;
  // The step's global batch where train.rampup_batch_size ramps it (then
  // logged, as Megatron logs its batch size), else 0.
  int global_batch = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, tflops = 0, mfu = 0;
  double seconds = 0;
  // Rank 0's memory after the step (kernels/memory.h: the GPU's device memory
  // in use, or the process's resident set on the CPU), and its total; 0 on
  // other ranks, which log nothing.
  double memory_bytes = 0, memory_total = 0;
  // MoE only (NaN for a dense model): mean auxiliary loss per micro-batch,
  // the worst layer's load imbalance (max / mean tokens per expert), drops.
  double moe_aux_loss = std::nan(""), moe_imbalance = std::nan(""), moe_dropped = 0;
  // Of moe_aux_loss, the sequence-wise balance loss (model.moe.seq_aux_loss_coeff
  // > 0; NaN otherwise), with its coefficient, as Megatron's seq_load_balancing_loss.
  double moe_seq_aux_loss = std::nan("");
  // Dropless expert parallelism only (NaN otherwise): the most rows any rank's
  // experts were routed in one micro-batch, as a multiple of the balanced load
  // (model.moe.ep_recv_headroom refuses a micro-batch above it), worst layer.
  double moe_ep_recv_peak = std::nan("");
  // fp16 only: the loss scale the step ran with (NaN otherwise), and whether
  // its gradients overflowed, so the update was skipped.
  double loss_scale = std::nan("");
  bool skipped = false;
  // log.params_norm only (NaN otherwise): all parameters' L2 norm after the step.
  double params_norm = std::nan("");
  // log.timers only: each phase's min and max over the world's ranks.
  std::optional<StepTimes> times;
};

struct TrainerOptions {
  bool synthetic_data = false;  // bench: uniform random tokens instead of data.train
  bool write_run_dir = true;    // job.yaml, metrics.jsonl and checkpoints in run.dir
  // With write_run_dir false: still resume from the job's checkpoint (trainer
  // evaluate), reading it and writing nothing.
  bool resume_read_only = false;
  FILE* log = stdout;           // nullptr = silent
  // Data-parallel gradient buckets (zero 0/1, no ep, no pipeline) reduced as
  // each fills during the last micro-batch's backward instead of after it.
  // auto: on GPU ranks with tp 1, where it overlaps backward and the dp
  // communicator is the only one in use (NCCL documents concurrent use of
  // two communicators as unsafe unless ordered); CPU ranks keep reducing
  // after backward (MPI calls block: nothing would overlap). Same numbers
  // either way (tested on CPU ranks with `on`).
  enum class GradOverlap { auto_, on, off };
  GradOverlap grad_overlap = GradOverlap::auto_;
  int64_t grad_bucket_bytes = int64_t(25) << 20;
};

class Trainer {
 public:
  // One rank on its own (tests, bench).
  explicit Trainer(const JobSpec& spec, TrainerOptions options = {});
  // This rank's part of a job on `mesh` (which must outlive the trainer).
  Trainer(const JobSpec& spec, parallel::Mesh& mesh, TrainerOptions options = {});
  ~Trainer();

  // Runs optimizer steps from the resumed step (0 when fresh) to train.steps,
  // or until a stop signal (then saves a checkpoint); returns the last step run.
  int run();
  int start_step() const { return start_step_; }
  // The checkpoint directory resumed from ("" when none was).
  std::string resumed_from() const;
  // One optimizer step (1-based); returns its record. Opens and closes
  // log.profile_steps' profiler range where it begins and ends.
  StepRecord train_step(int step);
  // Mean validation loss over eval_batches micro-batches (the same ones every time).
  double evaluate();

  const JobSpec& spec() const { return spec_; }
  const MemoryPlan& plan() const { return plan_; }
  size_t allocated_bytes() const { return arenas_->allocated_bytes(); }
  const std::vector<StepRecord>& history() const { return history_; }
  model::Model& model() { return *model_; }
  AdamW& optimizer() { return *optimizer_; }
  parallel::Mesh& mesh() { return *mesh_; }
  Context& context() { return ctx_; }
  // ZeRO-3's gathers and shards (parallel.zero: 3), ZeRO-2's gradient
  // reduce-scatters and shard (zero 2 over > 1 rank), else nullptr.
  const ShardedParams* sharded_params() const { return sharded_.get(); }
  // The dp bucket reducer (zero 0/1 with dp > 1 and no ep), else nullptr.
  const parallel::GradReducer* grad_reducer() const { return reducer_.get(); }

 private:
  void setup();
  void synchronize_gradients();
  void finish_moe_step(StepRecord& r, int global_batch);
  void sync_tied_table();
  double evaluate_pipeline();
  // Every dp rank must run each evaluation forward (collectives inside it).
  bool lockstep_forwards() const;
  // The micro-batch's sequences into model chunk `chunk`'s input tensors.
  void load_micro_batch(const data::SampleSource* source, int64_t first_sample, int chunk = 0);
  // Sample `sample` as local sequence b of the host arrays; returns how many
  // of its local targets data.eod_mask_loss masked.
  int64_t read_sequence(const data::SampleSource* source, int64_t sample, int b);
  // data.eod_mask_loss: the targets masked in samples [first, first + count)
  // of this rank, and what the loss averages over: `all` targets of the
  // gradient group less every rank's masked ones (a sum over the group).
  double masked_targets(const data::SampleSource* source, int64_t first, int64_t count);
  double counted_targets(double all, double masked_here, const std::string& batch);
  double counted_eval_targets();  // the same for one evaluation
  int64_t consumed_before(int step) const;  // training samples consumed before `step`
  int64_t first_sample(int step) const;     // this rank's first training sample of `step`
  // The 1F1B table's runner for this many micro-batches a step: pipeline_ at
  // the full global batch; the ramp's smaller batches each get theirs, made
  // when first met (their slots are within the plan's, made for the full batch).
  PipelineRunner& pipeline_for(int micro_batches);
  StepRecord run_step(int step);          // train_step's work
  // The token losses of the micro-batch just run forward, added on the device
  // (no wait); take_loss_sum() reads what was added since it last ran.
  void add_micro_batch_loss();
  double take_loss_sum();
  void await_device();  // before a host copy on a multi-GPU rank: poll, never block
  double grad_norm() { return global_norm(false); }
  // The L2 norm over the whole model of its gradients (params false) or its
  // parameters: each element once, whatever the mesh (tp splits and replicas,
  // ZeRO 2/3 shards, experts over ep, pipeline stages, the tied table's copy).
  double global_norm(bool params);
  // The reduced gradient elements this rank holds (zero 2/3: its shards).
  std::vector<Tensor> owned_gradients() const;
  Tensor flat_arena(model::Category category) const;
  void log_step(const StepRecord& r);
  void check_finite(const StepRecord& r) const;  // throws when the run diverged
  void log_eval(int step, double val_loss);
  // "saved checkpoint PATH" for a completed save; nothing for "".
  void log_saved(const std::string& path, bool background);

  JobSpec spec_;
  TrainerOptions options_;
  std::unique_ptr<parallel::Mesh> owned_mesh_;
  parallel::Mesh* mesh_ = nullptr;
  parallel::ZeroShard shard_;  // this rank's range of the flat parameter arena
  // What shard_ and the dense parameters' state shard over (the gradient
  // group; routed experts: edp with ep > 1).
  parallel::Axis zero_axis_ = parallel::Axis::dp;
  // What replicated parameters' gradients are averaged over: the data-parallel
  // ranks, and with context parallelism (each cp rank's backward covers other
  // tokens of the same sequences) the whole dp x cp group, as in Megatron-Core.
  parallel::Axis grad_axis_ = parallel::Axis::dp;
  int grad_size_ = 1;
  parallel::Communicator& grad_comm() { return mesh_->comm(grad_axis_); }
  std::unique_ptr<parallel::GradReducer> reducer_;
  std::unique_ptr<parallel::CommStreamOverlap> dp_overlap_;  // reducer_'s buckets on the comm stream
  bool reduce_in_backward_ = false;  // reducer_ fed by the model's gradient-ready hook
  std::unique_ptr<parallel::ExpertGradReducer> expert_reducer_;  // ep > 1
  int dp_size_ = 1, dp_rank_ = 0;  // the data axis: which samples this rank reads
  std::unique_ptr<PipelineRunner> pipeline_;  // pp > 1 only
  std::map<int, std::unique_ptr<PipelineRunner>> ramp_pipelines_;  // see pipeline_for
  std::unique_ptr<MixedPrecision> precision_;
  std::unique_ptr<DeviceContext> device_;  // declared first: outlives every device buffer
  Context ctx_;
  std::unique_ptr<BatchUploader> uploader_;  // each micro-batch's ids, targets and layout
  std::unique_ptr<model::Model> model_;
  // pp > 1 with tied embeddings: the first and the last stage (parallel/embedding_group.h).
  std::unique_ptr<parallel::Communicator> embedding_group_;
  std::unique_ptr<AdamW> optimizer_;
  MemoryPlan plan_;
  std::unique_ptr<Arenas> arenas_;
  std::unique_ptr<ShardedParams> sharded_;  // zero 3, and zero 2 over > 1 rank
  std::unique_ptr<data::SampleSource> train_data_, val_data_;
  std::vector<int32_t> host_tokens_, host_ids_, host_targets_;  // ids, targets: this rank's tokens
  // Documents packed into a sequence: host_tokens_' layout (seq_), and this
  // rank's tokens' (host_; empty when the model takes none).
  std::vector<int32_t> seq_doc_start_, seq_positions_, host_doc_start_, host_positions_;
  // host_tokens_ (one sequence) -> sequence b of ids, targets and the document
  // layout; returns the targets masked there.
  int64_t keep_local_tokens(int b);
  Tensor norm_out_;  // (4) f32 on the device, for the gradient norm
  Tensor loss_sum_;  // (1) f64 on the device: token losses since take_loss_sum()
  void* norm_mem_ = nullptr;
  double peak_flops_ = 0;
  int peak_remeasures_ = 0;  // refine_cpu_peak's count
  int accum_steps_ = 1;  // micro-batches per step at the full global batch
  std::optional<BatchSchedule> batches_;
  std::vector<StepRecord> history_;
  std::unique_ptr<checkpoint::Checkpointer> checkpointer_;
  int start_step_ = 0;
  int64_t samples_at_start_ = 0;  // training samples the resumed checkpoint had consumed
  // When construction began: what train.max_minutes counts from.
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  FILE* metrics_ = nullptr;
  std::unique_ptr<TensorBoardMetrics> tensorboard_;  // log.metrics: tensorboard
  std::unique_ptr<StepTimers> timers_;                // log.timers (off: every mark a no-op)
  std::unique_ptr<ProfileWindow> profile_;            // log.profile_steps (off: does nothing)
};

}  // namespace trainer::engine
