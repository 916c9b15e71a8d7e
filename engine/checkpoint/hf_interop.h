// Hugging Face interop: load GPT2LMHeadModel / LlamaForCausalLM safetensors
// weights into the model (model.init_from), and export a checkpoint as
// model.safetensors + config.json that transformers loads as it is.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/checkpoint/hf_host_tensor.h"
#include "engine/checkpoint/slice.h"
#include "engine/optimizer.h"
#include "kernels/context.h"
#include "model/buffers.h"
#include "model/model_config.h"

namespace trainer::engine::checkpoint {

// `path`: a .safetensors file, or a directory holding model.safetensors or
// model.safetensors.index.json (sharded). GPT-2: Conv1D (in, out) weights are
// transposed, c_attn is split into q/k/v, names with or without the
// "transformer." prefix; Llama: names as they are (HF's rotate-half RoPE is
// the layout this model uses). F32/BF16/F16/F64 sources become fp32; the
// vocabulary is zero-padded to cfg.padded_vocab(); a missing lm_head.weight
// of an untied model is the token table (HF tied). Every problem is an
// InputError naming the file and tensor. Loads this rank's slices; with
// `zero3` (an optimizer whose layout shards the parameters, parallel.zero: 3)
// only this rank's shard of each, into the optimizer's parameter shards, as
// a resume does.
void load_hf_weights(const std::string& path, const model::ModelConfig& cfg,
                     model::Buffers& buffers, Context& ctx, const ShardPosition& position = {},
                     const AdamW* zero3 = nullptr);

struct HfExportOptions {
  // The tokenizer the training data was tokenized with, exported with the
  // model: GPT-2 BPE files (vocab and merges, both or neither), or a Hugging
  // Face tokenizer.json (not with them).
  std::string vocab, merges, tokenizer;
  // The files' dtype: "fp32", "bf16" (round to nearest even), "fp16", or
  // "fp8": the layers' projection and expert weights in fine-grained fp8
  // blocks of fp8_block_rows x fp8_block_cols with their scales, the rest
  // bf16, as DeepSeek-V3's hub files (hf_fp8.h).
  std::string dtype = "fp32";
  int64_t fp8_block_rows = 128, fp8_block_cols = 128;
  // save_pretrained's default: above it the weights go to
  // model-0000i-of-0000n.safetensors shards and model.safetensors.index.json.
  uint64_t max_shard_bytes = 5'000'000'000ull;
};

// trainer export: the newest good checkpoint under `path` (a step directory,
// a checkpoint root, or a run directory) -> out_dir/model.safetensors (or its
// shards and index) and out_dir/config.json (and the tokenizer's files,
// hf_tokenizer.h), each written atomically; model files of an earlier export
// there are removed once the new ones are in place. Tensors stream one at a
// time from the checkpoint to the file: host memory holds one tensor, not the
// model. Everything is checked before the first file is written. Returns the
// step directory used.
std::string export_hf(const std::string& path, const std::string& out_dir, FILE* log,
                      const HfExportOptions& options = {});

}  // namespace trainer::engine::checkpoint
