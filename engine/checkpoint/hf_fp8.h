// Fine-grained fp8 checkpoints, as DeepSeek-V3 publishes its weights and
// transformers' FineGrainedFP8Config (Qwen3's -FP8 releases too) describes
// them: config.json's quantization_config {quant_method: fp8, fmt: e4m3,
// activation_scheme: dynamic, weight_block_size: [bo, bi]}, and each
// quantized weight W (out, in) stored as F8_E4M3 codes q beside a
// "<name>_scale_inv" of ceil(out / bo) x ceil(in / bi) block scales s:
// W[r][c] = e4m3(q[r][c]) x s[r / bo][c / bi] (DeepSeek's weight_dequant).
// init_from dequantizes them to fp32 on the way in, and `trainer export
// --dtype fp8` writes them (the rest in bf16, as DeepSeek's hub files).
#pragma once

#include <cstdint>
#include <string>

#include "engine/checkpoint/hf_config_check.h"
#include "engine/checkpoint/hf_host_tensor.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/json.h"
#include "model/model_config.h"

namespace trainer::engine::checkpoint {

struct Fp8Blocks {
  int64_t rows = 128, cols = 128;  // DeepSeek's and transformers' default block
  std::string from = "the default 128 x 128 blocks (no config.json quantization_config)";
};

// A config.json's quantization_config, absent or fine-grained fp8 as above;
// anything else is a difference ConfigCheck reports.
void check_quantization(const ConfigCheck& c);

// The block size a source's tensors are quantized with: its config.json's
// weight_block_size, else the default.
Fp8Blocks fp8_blocks(const std::string& path);

// The fp32 weight of codes `w` (F8_E4M3) and block scales `scale` (F32, BF16 or
// F16), named `name` and `scale_name` in `file` and `scale_file` for errors.
HostTensor dequantize_fp8(const SafetensorsFile& file, const std::string& name,
                          const SafetensorsFile& scale_file, const std::string& scale_name,
                          const Fp8Blocks& blocks);

// ---- export (--dtype fp8).
// An InputError unless cfg's class is one whose linear layers all quantize:
// Llama, Mistral, Qwen2, Qwen3 and DeepSeek-V3 (whose router is not an
// nn.Linear). GPT-2's Conv1D and the other MoE classes' nn.Linear routers
// would need transformers' modules_to_not_convert patterns.
void check_fp8_export(const model::ModelConfig& cfg, const std::string& architecture);
// Whether the HF tensor `name` of `shape` is written in fp8 blocks: a 2-d
// weight of a decoder layer's projections or experts (not a router, norm,
// embedding or lm_head).
bool fp8_exported(const std::string& name, const std::vector<int64_t>& shape);
// W (out, in) as E4M3 codes and block scales s = the block's amax / 448
// (1 for an all-zero block), so that e4m3(code) x s is W to fp8's precision.
struct Fp8Weight {
  std::vector<uint8_t> codes;
  HostTensor scales;
};
Fp8Weight quantize_fp8(const HostTensor& w, int64_t block_rows, int64_t block_cols);
// config.json's quantization_config of such an export.
Json fp8_quantization_config(const model::ModelConfig& cfg, int64_t block_rows, int64_t block_cols);

}  // namespace trainer::engine::checkpoint
