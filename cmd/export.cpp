// trainer export RUN_DIR_OR_CHECKPOINT --format hf --out DIR [--vocab V --merges M] [--dtype D] [--max-shard-size S] [--reference-logits TOKENS]
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cmd/subcommand.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/hf_interop.h"
#include "engine/hf_reference.h"
#include "kernels/error.h"

namespace trainer::cmd {
namespace {

// "5GB" (10^9, as transformers), "2GiB" (2^30), "500MB", "20KB" or plain bytes.
uint64_t parse_size(const std::string& text, const char* option) {
  size_t end = 0;
  double value = -1;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
  }
  std::string unit = text.substr(std::min(end, text.size()));
  static const std::pair<const char*, double> units[] = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : units)
    if (unit == name && value > 0) return static_cast<uint64_t>(value * scale);
  throw InputError(fmt::format("{}: '{}' is not a size (expected e.g. 5GB, 500MB, 2GiB or bytes)",
                               option, text));
}

struct ExportArgs {
  std::string source;
  std::string format = "hf";
  std::string out;
  int reference_tokens = 0;
  engine::checkpoint::HfExportOptions options;
  std::string max_shard_size = "5GB";
  std::vector<int64_t> fp8_block;
};

Registrar reg("export", "export a checkpoint (Hugging Face safetensors + config.json)",
              [](CLI::App& sub) {
  auto args = std::make_shared<ExportArgs>();
  add_checkpoint_source(sub, args->source);
  sub.add_option("--format", args->format, "output format: hf (GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM or "
                  "MixtralForCausalLM)");
  sub.add_option("--out", args->out, "output directory")->required();
  sub.add_option("--vocab", args->options.vocab,
                 "also export the tokenizer: encoder.json (GPT-2) or vocab.json, as given to "
                 "trainer tokenize (with --merges)");
  sub.add_option("--merges", args->options.merges, "vocab.bpe (GPT-2) or merges.txt (with --vocab)");
  sub.add_option("--tokenizer", args->options.tokenizer,
                 "instead of --vocab/--merges: the Hugging Face tokenizer.json the data was tokenized "
                 "with (e.g. Llama 3's or Llama 2's), exported for PreTrainedTokenizerFast");
  sub.add_option("--dtype", args->options.dtype,
                 "the weights' dtype: fp32, bf16 or fp16 (rounded to nearest even), or fp8: the layers' "
                 "projection and expert weights in fine-grained fp8 blocks with per-block "
                 "weight_scale_inv, the rest bf16, as DeepSeek-V3's hub files (Llama, Mistral, Qwen2, "
                 "Qwen3 and DeepSeek-V3 models)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
  sub.add_option("--fp8-block", args->fp8_block,
                 "with --dtype fp8: the blocks' rows and columns (default 128 128, DeepSeek's)")
      ->expected(2);
  sub.add_option("--max-shard-size", args->max_shard_size,
                 "above it, model-0000i-of-0000n.safetensors shards and an index, as save_pretrained "
                 "(5GB, 500MB, 2GiB or bytes)");
  sub.add_option("--reference-logits", args->reference_tokens,
                 "also write this trainer's fp32 logits on TOKENS fixed token ids "
                 "(reference.json, reference_logits.f32) to check another loader against, "
                 "e.g. scripts/hf_check.py for transformers");
  return std::function<int()>([args] {
    TRAINER_INPUT_CHECK(args->format == "hf", "--format: '{}' is not supported (expected hf)",
                        args->format);
    TRAINER_INPUT_CHECK(args->reference_tokens >= 0,
                        "--reference-logits: expected a number of tokens (>= 1; 0 = none), got {}",
                        args->reference_tokens);
    args->options.max_shard_bytes = parse_size(args->max_shard_size, "--max-shard-size");
    TRAINER_INPUT_CHECK(args->fp8_block.empty() || args->options.dtype == "fp8",
                        "--fp8-block: sizes the blocks of --dtype fp8, but --dtype is {}", args->options.dtype);
    if (!args->fp8_block.empty())
      args->options.fp8_block_rows = args->fp8_block[0], args->options.fp8_block_cols = args->fp8_block[1];
    engine::checkpoint::check_output_dir(args->out, "--out");
    std::string step_dir = engine::checkpoint::export_hf(args->source, args->out, stdout, args->options);
    if (args->reference_tokens > 0)
      engine::write_hf_reference(step_dir, args->out, args->reference_tokens, stdout);
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
