// ModelConfig: the model's shape as the layers see it (engine fills it from the
// job spec's model section) plus how this rank's copy is split.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/rope_scaling.h"
#include "kernels/tensor.h"
#include "model/moe_config.h"
#include "parallel/cp_layout.h"

namespace trainer::model {

enum class Family { gpt2, llama };

// Multi-head latent attention (DeepSeek-V2/V3, model/mla_layer.h): the sizes
// of its latents and head parts. With it, head_size is the q/k head
// (qk_nope + qk_rope) and n_kv_head is n_head.
struct MlaConfig {
  bool enabled = false;
  int64_t q_lora_rank = 0;  // 0: q_proj straight from the hidden state
  int64_t kv_lora_rank = 0;
  int64_t qk_nope = 0, qk_rope = 0, v_dim = 0;
  int64_t qk_dim() const { return qk_nope + qk_rope; }
};

struct ModelConfig {
  Family family = Family::gpt2;
  int n_layer = 4;
  int d_model = 256;
  int n_head = 4;
  int n_kv_head = 4;
  int d_ff = 1024;
  int vocab_size = 50257;
  int max_seq_len = 256;
  bool tie_embeddings = true;
  // llama: biases on the q, k and v projections (Qwen2; Megatron's
  // --add-qkv-bias). gpt2 has biases on every projection regardless.
  bool qkv_bias = false;
  // llama: an RMSNorm over each query and key head (weights of head_dim
  // shared by the heads) before RoPE (Qwen3; Megatron's --qk-layernorm).
  bool qk_norm = false;
  MlaConfig mla;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;  // llama: Llama 3.1's frequency scaling when active
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
  uint64_t seed = 1234;

  // Tensor parallelism: heads, MLP columns and vocabulary rows split over tp
  // ranks; with sequence_parallel the residual stream is split by tokens too.
  int tp = 1;
  int tp_rank = 0;
  bool sequence_parallel = false;

  // Context parallelism: each sequence is split over cp ranks in 2 * cp chunks
  // (parallel/cp_layout.h); this rank holds two of them, so BatchShape::T is
  // the local T / cp tokens, attention gathers the keys and values of the whole
  // sequence, and positions (RoPE, learned) are the chunks' global ones.
  int cp = 1;
  int cp_rank = 0;

  // Full activation recomputation: a block keeps only its output (the
  // residual stream); its internal activations share one region with every
  // other block's and are recomputed by running its forward again just
  // before its backward (Megatron's --recompute-granularity full, per layer).
  // recompute_num_layers > 0 recomputes only the first that many blocks of
  // each model chunk (pipeline stage, or virtual stage), the rest keeping
  // their activations (Megatron's --recompute-method block
  // --recompute-num-layers): memory traded for compute a block at a time.
  bool recompute_full = false;
  int recompute_num_layers = 0;
  bool recomputes(int block_in_chunk) const {
    return recompute_full && (recompute_num_layers <= 0 || block_in_chunk < recompute_num_layers);
  }

  // Documents packed into a sequence (data.reset_attention_mask,
  // data.reset_position_ids): each chunk's activations hold a per-token
  // doc_start (the global position its document starts at; attention sees
  // only keys from there) and/or positions (restarting at each document:
  // RoPE angles, learned position rows), which the caller fills with the ids.
  bool doc_masking = false;
  bool reset_positions = false;
  // Sliding-window attention (model.sliding_window): > 0 makes each query
  // see only itself and the sliding_window - 1 keys before it, at global
  // positions (a context-parallel chunk's queries included); with documents,
  // the later of the two first keys. The attention kernels take it as an
  // argument, so nothing per token is stored. full_attention_every N > 0
  // (model.full_attention_every, Megatron's --window-attn-skip-freq) keeps
  // every N-th layer (1-based: layers N, 2N, ...) in full attention.
  int64_t sliding_window = 0;
  int full_attention_every = 0;
  int64_t window_of(int layer) const {
    const bool full = full_attention_every > 0 && (layer + 1) % full_attention_every == 0;
    return full ? 0 : sliding_window;
  }

  // ZeRO sharding by parameter unit (embedding, block, head): > 0 pads each
  // unit part to a multiple of this many elements (dp shards of 64;
  // Buffers::pad_param_parts). With share_blocks (ZeRO-3) every block's
  // parameters go to one shared region (Buffers::share_block_parameters);
  // the engine gathers a block's before running it. With share_block_grads
  // (ZeRO-2) only their gradients do (Buffers::share_block_gradients): the
  // engine reduce-scatters a block's right after its backward.
  int64_t shard_align = 0;
  bool share_blocks = false;
  bool share_block_grads = false;
  // 2: blocks alternate between two shared regions, so the engine can
  // overlap one block's collectives with the next block's compute.
  int shared_regions = 1;
  // Experts split over ep: routed experts are sharded over edp, the rest
  // over dp, so each block's experts are parts of their own.
  bool shard_experts_apart = false;

  // Pipeline parallelism: this rank holds global layers [layer_begin,
  // layer_end) (layer_end < 0 = n_layer), the embedding when first_stage and
  // the final norm and LM head when last_stage.
  int layer_begin = 0, layer_end = -1;
  bool first_stage = true, last_stage = true;
  // Interleaved pipelines (virtual stages): the rank holds several chunks of
  // layers, chunk c = global layers [chunk_layers[c].first, .second); empty =
  // one chunk, [layer_begin, layer_end). The embedding is on chunk 0 (when
  // first_stage), the head on the last chunk (when last_stage).
  std::vector<std::pair<int, int>> chunk_layers;

  // Mixed precision: activations and the GEMMs' weight copies are stored in
  // act_dtype (f32, bf16 or f16); parameters, gradients and optimizer state
  // stay fp32. fp8: the blocks' linear layers quantise their operands to fp8
  // with delayed per-tensor scaling (E4M3 forward, E5M2 gradients); the
  // embedding, the LM head, attention's core and, with fp8_first_last_bf16,
  // the first and last transformer layers stay in act_dtype (bf16).
  DType act_dtype = DType::f32;
  bool fp8 = false;
  bool fp8_first_last_bf16 = true;
  // The GPU's FP8 GEMMs take rows in multiples of 16 (the weight gradient
  // contracts over them): a routed expert's ragged row block goes through
  // zero-padded staging there (Buffers::Fp8Workspace::pad_*). The CPU needs none.
  bool fp8_pad_rows = false;
  // The GPU keeps each fp8 GEMM weight's codes and transposed codes from the
  // step's first use to its end (Transformer Engine's weight caching across
  // micro-batches): within a step neither the weights nor the scales change,
  // so later micro-batches and every backward reuse the same codes. 2 bytes
  // per weight element in the compute copies; not with shared blocks (ZeRO-3
  // gathers a block per use) nor with precision.fp8_weight_cache: false. The
  // CPU re-quantises (the same codes).
  bool fp8_cache_weights = false;
  // The CUDA backend's attention (run.attention): the fused kernels where the
  // shape allows them, or (false) the unfused path everywhere, whose scores
  // scratch the plan then counts. The CPU has one attention and ignores it.
  bool fused_attention = true;
  int fp8_amax_history = 1024;
  int fp8_margin = 0;
  bool fp8_layer(int layer) const {
    return fp8 && !(fp8_first_last_bf16 && (layer == 0 || layer == n_layer - 1));
  }

  // Mixture of experts: the MLP of every `moe_every`-th layer (1-based) from
  // layer `moe_first_dense` on is an MoE.
  bool moe_enabled = false;
  int moe_every = 1;
  int moe_first_dense = 0;
  MoeConfig moe;
  bool is_moe_layer(int layer) const {
    return moe_enabled && layer >= moe_first_dense && (layer + 1) % moe_every == 0;
  }
  bool has_dense_mlp() const { return !moe_enabled || moe_every > 1 || moe_first_dense > 0; }

  // 0: d_model / n_head. Llama's heads may be of their own size (Qwen3 0.6B:
  // 16 of 128 over a width of 1024): q/k/v project to heads x head_dim, o_proj back.
  int head_size = 0;
  int head_dim() const { return head_size > 0 ? head_size : d_model / n_head; }
  int local_heads() const { return n_head / tp; }
  // Fewer KV heads than tp ranks: each rank holds one KV head, shared by
  // kv_replicas() consecutive tp ranks (the one its query heads read).
  int local_kv_heads() const { return n_kv_head >= tp ? n_kv_head / tp : 1; }
  int kv_replicas() const { return n_kv_head >= tp ? 1 : tp / n_kv_head; }
  int local_ff() const { return d_ff / tp; }
  int64_t local_vocab() const { return padded_vocab() / tp; }
  int64_t vocab_start() const { return local_vocab() * tp_rank; }
  // Vocabulary rows actually stored: padded so every TP shard and GEMM is aligned.
  int64_t padded_vocab() const {
    int64_t m = 128LL * tp;
    return (vocab_size + m - 1) / m * m;
  }
  bool is_llama() const { return family == Family::llama; }
  int stage_layer_end() const { return layer_end < 0 ? n_layer : layer_end; }
};

// One micro-batch's geometry: the activation buffers are planned for it.
struct BatchShape {
  int64_t B = 1;  // sequences per micro-batch
  int64_t T = 1;  // tokens per sequence on this rank (seq_len / cp)
  int64_t tokens() const { return B * T; }
};

// This rank's chunks of each sequence under context parallelism.
inline parallel::CpLayout cp_layout(const ModelConfig& cfg, const BatchShape& batch) {
  return parallel::CpLayout{cfg.cp, cfg.cp_rank, batch.T * cfg.cp};
}

// Rows of the residual stream this rank holds: all tokens, or its 1/tp block
// of them under sequence parallelism.
inline int64_t residual_rows(const ModelConfig& cfg, const BatchShape& batch) {
  return cfg.sequence_parallel ? batch.tokens() / cfg.tp : batch.tokens();
}

}  // namespace trainer::model
