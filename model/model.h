// Model: a GPT-2 or Llama decoder built from one ModelConfig. Construction only
// declares buffers (nothing is allocated); the engine allocates the arenas,
// binds them, and then calls init_parameters / forward / backward.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "model/block.h"
#include "model/embedding_layer.h"
#include "model/lm_head.h"
#include "model/scratch.h"

namespace trainer::model {

// ZeRO-3: what the engine does around a block whose parameters this rank
// holds only a shard of (engine/sharded_params.h). Units index
// buffers().param_units().
class BlockParamHooks {
 public:
  virtual ~BlockParamHooks() = default;
  // Before the block's forward, or its backward (with the recompute before
  // it): its whole parameters into the shared region; for backward also its
  // gradients there zeroed.
  virtual void gather(int unit, bool for_backward) = 0;
  // After its backward: its gradients out of the shared region, before the
  // next block overwrites them.
  virtual void release_gradients(int unit) = 0;
};

class Model {
 public:
  Model(const ModelConfig& cfg, const BatchShape& batch);

  const ModelConfig& config() const { return cfg_; }
  const BatchShape& batch() const { return batch_; }
  Buffers& buffers() { return buf_; }
  const Buffers& buffers() const { return buf_; }

  // Parameters from the counter-based RNG (seed, name, global index).
  // The overloads with a unit act on that parameter unit only
  // (buffers().param_units(); ZeRO-3, where blocks share one region).
  void init_parameters(Context& ctx);
  void init_parameters(Context& ctx, const Buffers::ParamUnit& unit);
  // Mixed precision: casts every fp32 matrix into its compute-dtype copy. Call
  // after anything changes the parameters (init, load, optimizer step).
  void refresh_compute_weights(Context& ctx);
  void refresh_compute_weights(Context& ctx, const Buffers::ParamUnit& unit);
  void zero_grads(Context& ctx);
  // ZeRO-3: called around every block's forward and backward; nullptr = none.
  void set_block_param_hooks(BlockParamHooks* hooks) { block_hooks_ = hooks; }

  Tensor input_ids() const { return buf_.get(ids_); }  // (N) int32, the caller fills it
  Tensor targets() const { return buf_.get(targets_); }  // (N) int32, < 0 = ignored
  // Documents packed into a sequence, the caller fills these for every chunk
  // it runs (each chunk's are in its activations, kept for its backward):
  // (N) int32 global position each token's document starts at
  // (config().doc_masking), and each token's position (config().reset_positions,
  // restarting at 0 with each document). Empty when off.
  Tensor doc_start(int chunk = 0) const;
  Tensor positions(int chunk = 0) const;
  bool needs_documents() const { return cfg_.doc_masking || cfg_.reset_positions; }

  // Pipeline stage I/O (R, C) of model chunk `chunk`, all in the activations
  // arena: the input a chunk without the embedding receives, the output a
  // chunk without the head sends, the output gradient such a chunk receives,
  // and (after its backward) the input gradient it sends. Without virtual
  // stages there is one chunk: the embedding is on it when
  // config().first_stage, the head when config().last_stage.
  Tensor stage_input(int chunk = 0) const;
  Tensor stage_output(Context& ctx, int chunk = 0);
  Tensor stage_output_grad(int chunk = 0) const;
  Tensor stage_input_grad() const { return buf_.get(scratch_.dres); }

  // Model chunks (config().chunk_layers; 1 without virtual stages). Each
  // chunk's activations are one contiguous region of the activations arena,
  // chunk_activation_bytes(c) long, so one micro-batch's activations of one
  // chunk fit a slot of that size and bind_chunk() points the chunk's buffers
  // at any such slot (aligned as the arena). Without bind_chunk, the arena
  // bound with buffers().bind holds every chunk at its declared place.
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  bool has_embedding(int chunk) const { return cfg_.first_stage && chunk == 0; }
  bool has_head(int chunk) const { return cfg_.last_stage && chunk == num_chunks() - 1; }
  size_t chunk_activation_bytes(int chunk) const;
  void bind_chunk(int chunk, void* slot, Device device);
  // Tied embeddings cut over pipeline stages: the gradient of this stage's
  // copy of the token table (the embedding's on the first stage, the head's
  // copy on the last); empty on other stages and when nothing is split.
  Tensor tied_table_grad() const;

  // Per-token losses of the micro-batch in input_ids()/targets() (forward
  // of the chunk with the head), or the chunk's stage output.
  void forward(Context& ctx, int chunk = 0);
  Tensor losses(Context& ctx);
  // The head's logits of that forward: (N, this rank's padded vocabulary rows).
  Tensor logits(Context& ctx);
  // Accumulates into the gradients d(sum_n dloss * loss_n) / d(params) of
  // the chunk, from the loss (head) or its stage output gradient. MoE aux
  // losses weigh aux_dloss per token of the micro-batch (default dloss; they
  // differ when some tokens' losses are masked and dloss is 1 / the rest).
  void backward(Context& ctx, float dloss, int chunk = 0, std::optional<float> aux_dloss = {});

  // Called from backward() with the index (into buffers().params()) of every
  // parameter whose gradient that backward has just completed: a block's
  // after the block, the head's after the head, the embedding's after the
  // embedding. Never for gradients changed after backward (finish_gradients'
  // sums over tp, the pipeline's tied-table sum). Lets the trainer reduce
  // buckets while backward continues; empty = none (the default).
  void set_grad_ready(std::function<void(int param)> hook) { grad_ready_ = std::move(hook); }
  // Whether backward alone completes this parameter's gradient (see above).
  bool grad_final_after_backward(int param) const;

  // The tensor-parallel group the layers' region ops use (default: one rank).
  void set_tp_group(parallel::Communicator* tp);
  // The expert-parallel group the MoE layers exchange tokens over (ep > 1).
  void set_ep_group(parallel::Communicator* ep) { ep_ = ep; }
  // The context-parallel group attention exchanges keys and values over (cp > 1).
  void set_cp_group(parallel::Communicator* cp) { cp_ = cp; }
  // n_kv_head < tp with kv_replicas() < tp: the tp ranks holding this rank's
  // KV head (parallel/kv_replicas.h); with kv_replicas() == tp the tp group is used.
  void set_kv_group(std::unique_ptr<parallel::Communicator> kv);
  // After the last micro-batch's backward: sums over tp the gradients each
  // rank holds only partially (norms under sequence parallelism), and over
  // the KV replica group those of replicated KV heads. Units whose gradients
  // share one region (ZeRO-2/3) are finished by the engine's hooks, block by block.
  void finish_gradients(Context& ctx);
  void finish_gradients(Context& ctx, const Buffers::ParamUnit& unit);

  // The mixture-of-experts layers of this stage (empty for a dense model).
  std::vector<const Moe*> moe_layers() const;
  // Their blocks' parameter units (into buffers().param_units()), in the same order.
  std::vector<int> moe_layer_units() const;
  void reset_moe_stats(Context& ctx);
  // Every MoE layer's step counters side by side, then their aux-loss sums
  // (Moe::step_aux), then their sequence-wise balance loss sums (0 for a layer
  // without): (L (2E) + 2L) f32, copied on the device (empty without MoE layers).
  Tensor gather_moe_step(Context& ctx) const;

  // Model FLOPs per token for forward + backward (GEMMs and attention, as in
  // the PaLM/Megatron MFU convention, causal attention counted in full).
  double flops_per_token() const;

 private:
  ModelConfig cfg_;
  BatchShape batch_;
  Buffers buf_;
  Scratch scratch_;
  Embedding embedding_;
  std::vector<Block> blocks_;
  LmHead head_;
  BufferId ids_ = -1, targets_ = -1;
  BufferId moe_summary_ = -1;
  struct Chunk {
    int block_begin = 0, block_end = 0;       // into blocks_
    BufferId stage_in = -1, stage_dout = -1;  // pipeline I/O (no embedding / no head)
    BufferId doc_start = -1, positions = -1;  // documents packed into a sequence
    size_t act_begin = 0, act_end = 0;        // its bytes of the activations arena
  };
  std::vector<Chunk> chunks_;
  struct ParamRange {
    int begin = 0, end = 0;  // into buf_.params()
  };
  ParamRange embedding_params_, head_params_;
  std::vector<ParamRange> block_params_;  // per blocks_ index
  std::vector<int> block_unit_;           // per blocks_ index: into buffers().param_units()
  BlockParamHooks* block_hooks_ = nullptr;
  void init_parameter(const Buffers::Param& p);
  void finish_gradient(const Buffers::Param& p);
  std::function<void(int)> grad_ready_;
  void report_ready(ParamRange r) const;
  int bound_chunk_ = -1;  // the chunk bind_chunk() last bound; -1: the whole arena
  const Chunk& chunk(int c) const;  // checks c is usable under the current binding
  Tensor stage_in(const LayerEnv& env, int c) const;  // what the chunk's first block reads
  void declare_fp8_workspace();
  std::unique_ptr<parallel::Communicator> single_tp_;
  parallel::Communicator* tp_ = nullptr;
  std::unique_ptr<parallel::Communicator> kv_;
  parallel::Communicator* kv_group() const;
  parallel::Communicator* ep_ = nullptr;
  parallel::Communicator* cp_ = nullptr;
  LayerEnv env(Context& ctx) const { return LayerEnv{ctx, buf_, *tp_, ep_, false, cp_, {}, {}}; }
  LayerEnv env(Context& ctx, int chunk) const;  // with the chunk's document tensors
};

}  // namespace trainer::model
