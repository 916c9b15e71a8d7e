// trainer export RUN_DIR_OR_CHECKPOINT --format hf --out DIR
#include <fmt/format.h>

#include "cmd/subcommand.h"
#include "engine/checkpoint/hf_interop.h"
#include "kernels/error.h"

namespace trainer::cmd {
namespace {

struct ExportArgs {
  std::string source;
  std::string format = "hf";
  std::string out;
};

Registrar reg("export", "export a checkpoint (Hugging Face safetensors + config.json)",
              [](CLI::App& sub) {
  auto args = std::make_shared<ExportArgs>();
  sub.add_option("source", args->source,
                 "a run directory, a checkpoint directory, or one step_* directory "
                 "(the newest intact checkpoint is used)")
      ->required();
  sub.add_option("--format", args->format, "output format: hf (GPT2LMHeadModel / LlamaForCausalLM)");
  sub.add_option("--out", args->out, "output directory")->required();
  return std::function<int()>([args] {
    TRAINER_INPUT_CHECK(args->format == "hf", "--format: '{}' is not supported (expected hf)",
                        args->format);
    engine::checkpoint::export_hf(args->source, args->out, stdout);
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
