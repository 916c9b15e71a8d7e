// trainer export RUN_DIR_OR_CHECKPOINT --format hf --out DIR [--vocab V --merges M] [--reference-logits TOKENS]
#include <fmt/format.h>

#include "cmd/subcommand.h"
#include "engine/checkpoint/hf_interop.h"
#include "engine/hf_reference.h"
#include "kernels/error.h"

namespace trainer::cmd {
namespace {

struct ExportArgs {
  std::string source;
  std::string format = "hf";
  std::string out;
  int reference_tokens = 0;
  engine::checkpoint::HfExportTokenizer tokenizer;
};

Registrar reg("export", "export a checkpoint (Hugging Face safetensors + config.json)",
              [](CLI::App& sub) {
  auto args = std::make_shared<ExportArgs>();
  add_checkpoint_source(sub, args->source);
  sub.add_option("--format", args->format, "output format: hf (GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM)");
  sub.add_option("--out", args->out, "output directory")->required();
  sub.add_option("--vocab", args->tokenizer.vocab,
                 "also export the tokenizer: encoder.json (GPT-2) or vocab.json, as given to "
                 "trainer tokenize (with --merges)");
  sub.add_option("--merges", args->tokenizer.merges, "vocab.bpe (GPT-2) or merges.txt (with --vocab)");
  sub.add_option("--reference-logits", args->reference_tokens,
                 "also write this trainer's fp32 logits on TOKENS fixed token ids "
                 "(reference.json, reference_logits.f32) to check another loader against, "
                 "e.g. scripts/hf_check.py for transformers");
  return std::function<int()>([args] {
    TRAINER_INPUT_CHECK(args->format == "hf", "--format: '{}' is not supported (expected hf)",
                        args->format);
    TRAINER_INPUT_CHECK(args->reference_tokens >= 0,
                        "--reference-logits: expected a number of tokens (>= 1), got {}",
                        args->reference_tokens);
    std::string step_dir = engine::checkpoint::export_hf(args->source, args->out, stdout, args->tokenizer);
    if (args->reference_tokens > 0)
      engine::write_hf_reference(step_dir, args->out, args->reference_tokens, stdout);
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
