// Hugging Face interop: load GPT2LMHeadModel / LlamaForCausalLM safetensors
// weights into the model (model.init_from), and export a checkpoint as
// model.safetensors + config.json that transformers loads as it is.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

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

// A tensor in HF's naming and layout, fp32, row-major.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Our global (padded, unfused, (out, in)) tensors -> HF's names and layouts.
std::map<std::string, HostTensor> to_hf_tensors(
    const model::ModelConfig& cfg, const std::map<std::string, HostTensor>& ours);

// GPT-2 BPE tokenizer files to export with the model (both or neither): the
// vocabulary and merges the training data was tokenized with.
struct HfExportTokenizer {
  std::string vocab, merges;
};

// trainer export: the newest good checkpoint under `path` (a step directory,
// a checkpoint root, or a run directory) -> out_dir/model.safetensors and
// out_dir/config.json (and the tokenizer's files, hf_tokenizer.h), each
// written atomically. Everything is checked before the first file is
// written. Returns the step directory used.
std::string export_hf(const std::string& path, const std::string& out_dir, FILE* log,
                      const HfExportTokenizer& tokenizer = {});

}  // namespace trainer::engine::checkpoint
