// Fine-grained fp8 checkpoints, as DeepSeek-V3 publishes its weights and
// transformers' FineGrainedFP8Config (Qwen3's -FP8 releases too) describes
// them: config.json's quantization_config {quant_method: fp8, fmt: e4m3,
// activation_scheme: dynamic, weight_block_size: [bo, bi]}, and each
// quantized weight W (out, in) stored as F8_E4M3 codes q beside a
// "<name>_scale_inv" of ceil(out / bo) x ceil(in / bi) block scales s:
// W[r][c] = e4m3(q[r][c]) x s[r / bo][c / bi] (DeepSeek's weight_dequant).
// init_from dequantizes them to fp32 on the way in; training and exports
// are in this trainer's own precision.
#pragma once

#include <cstdint>
#include <string>

#include "engine/checkpoint/hf_config_check.h"
#include "engine/checkpoint/hf_host_tensor.h"
#include "engine/checkpoint/safetensors.h"

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

}  // namespace trainer::engine::checkpoint
