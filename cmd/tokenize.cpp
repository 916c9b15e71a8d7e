// `trainer tokenize`: text or JSONL to llm.c shards or a Megatron dataset with
// GPT-2's byte-level BPE (see engine/data/README.md).
#include <unistd.h>

#include <cstdio>

#include "cmd/subcommand.h"
#include "engine/data/tokenize_corpus.h"
#include "engine/data/tokenizer.h"
#include "kernels/error.h"

namespace trainer::cmd {
namespace {

using engine::data::InputKind;
using engine::data::OutputFormat;

struct Args {
  engine::data::TokenizeOptions opt;
  std::string vocab, merges, tokenizer, format = "llmc", input = "auto";
  bool quiet = false;
};

Registrar tokenize_registrar(
    "tokenize", "tokenize text or JSONL with GPT-2's, Llama 3's, Qwen2's or Llama 2's BPE into llm.c shards or a Megatron dataset",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<Args>();
      sub.add_option("inputs", args->opt.inputs, "text files (one document each) or JSONL files (one per line)")
          ->required();
      sub.add_option("--vocab", args->vocab, "encoder.json (GPT-2) or vocab.json (Hugging Face), with --merges");
      sub.add_option("--merges", args->merges, "vocab.bpe (GPT-2) or merges.txt (Hugging Face), with --vocab");
      sub.add_option("--tokenizer", args->tokenizer,
                     "instead of --vocab/--merges: a Hugging Face tokenizer.json (GPT-2's, Llama 3's or "
                     "Qwen2's byte-level BPE, or Llama 2's / Mistral's SentencePiece-style BPE; Llama 3's "
                     "and Qwen2's vocabularies need --format megatron)");
      sub.add_option("--out", args->opt.out_prefix,
                     "output prefix: llmc writes PREFIX_train_000000.bin, PREFIX_val_000000.bin, ...; "
                     "megatron writes PREFIX.bin/.idx (PREFIX_train/PREFIX_val with --val-fraction)")
          ->required();
      sub.add_option("--format", args->format, "output format")->check(CLI::IsMember({"llmc", "megatron"}));
      sub.add_option("--input-format", args->input, "auto: .jsonl/.ndjson are JSONL, other files text")
          ->check(CLI::IsMember({"auto", "text", "jsonl"}));
      sub.add_option("--jsonl-field", args->opt.jsonl_field, "JSONL field holding the text");
      sub.add_option("--val-fraction", args->opt.val_fraction, "fraction of documents for validation, 0..1");
      sub.add_option("--shard-tokens", args->opt.shard_tokens, "llmc: tokens per shard");
      sub.add_option("--threads", args->opt.threads, "worker threads (0 = all cores)")
          ->check(whole_number(0, 1024));  // each holds a cache and a batch: ~1 MB
      sub.add_flag("--quiet", args->quiet, "no progress line");
      return [args]() {
        auto& opt = args->opt;
        opt.format = args->format == "megatron" ? OutputFormat::megatron : OutputFormat::llmc;
        opt.input_kind = args->input == "text" ? InputKind::text
                         : args->input == "jsonl" ? InputKind::jsonl : InputKind::auto_;
        opt.progress = !args->quiet && ::isatty(2);
        const bool files = !args->vocab.empty() || !args->merges.empty();
        TRAINER_INPUT_CHECK(files != !args->tokenizer.empty(),
                            "tokenize: give --vocab and --merges, or --tokenizer (one of the two)");
        TRAINER_INPUT_CHECK(!files || (!args->vocab.empty() && !args->merges.empty()),
                            "tokenize: --vocab and --merges go together");
        auto tok = files ? engine::data::Tokenizer::load(args->vocab, args->merges)
                         : engine::data::Tokenizer::load_hf(args->tokenizer);
        auto r = engine::data::tokenize_corpus(opt, tok);
        const double mb = r.bytes / 1e6;
        std::printf("tokenize: %lld documents (%lld val), %lld train + %lld val tokens, %.1f MB in %.2f s "
                    "(%.1f MB/s, %d threads; %.1f MB per CPU-second); sync %.2f s\n",
                    static_cast<long long>(r.documents), static_cast<long long>(r.val_documents),
                    static_cast<long long>(r.train_tokens), static_cast<long long>(r.val_tokens), mb,
                    r.seconds, mb / std::max(r.seconds, 1e-9), r.threads, mb / std::max(r.cpu_seconds, 1e-9),
                    r.sync_seconds);
        for (const auto& f : r.files) std::printf("  %s\n", f.c_str());
        return 0;
      };
    });

}  // namespace
}  // namespace trainer::cmd
