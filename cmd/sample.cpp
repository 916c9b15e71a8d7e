// trainer sample RUN_DIR_OR_CHECKPOINT [--prompt TEXT | --prompt-ids IDS] [--tokens N]
//   [--temperature T] [--top-k K] [--seed S] [--vocab FILE --merges FILE | --tokenizer FILE] [--ids]
#include <fmt/format.h>

#include <sstream>

#include "cmd/subcommand.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/data/tokenizer.h"
#include "engine/sampler.h"
#include "kernels/error.h"

namespace trainer::cmd {
namespace {

struct SampleArgs {
  std::string source;
  std::string prompt;
  std::string prompt_ids;
  std::string vocab = "data/gpt2/encoder.json";
  std::string merges = "data/gpt2/vocab.bpe";
  std::string tokenizer;
  bool print_ids = false;
  engine::SampleOptions options;
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TRAINER_INPUT_CHECK(used == item.size() && v >= 0 && v <= INT32_MAX,
                        "--prompt-ids: '{}' is not a token id (expected ids like 464,3290)", item);
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

Registrar reg("sample", "continue a prompt with a checkpoint's model (one CPU rank, fp32)",
              [](CLI::App& sub) {
  auto a = std::make_shared<SampleArgs>();
  add_checkpoint_source(sub, a->source);
  sub.add_option("--prompt", a->prompt, "text to continue (default: <|endoftext|>, as llm.c)");
  sub.add_option("--prompt-ids", a->prompt_ids, "token ids to continue instead, comma-separated");
  sub.add_option("--tokens", a->options.tokens, "new tokens to generate (default 64)");
  sub.add_option("--temperature", a->options.temperature, "0 = greedy; default 1.0");
  sub.add_option("--top-k", a->options.top_k, "sample among the k most likely tokens; 0 = all (default 40)");
  sub.add_option("--seed", a->options.seed, "same seed, prompt and checkpoint: same text")
      ->check(whole_number(0, UINT64_MAX));
  sub.add_option("--vocab", a->vocab, "GPT-2 encoder.json / HF vocab.json (default data/gpt2/encoder.json)");
  sub.add_option("--merges", a->merges, "vocab.bpe / merges.txt (default data/gpt2/vocab.bpe)");
  sub.add_option("--tokenizer", a->tokenizer,
                 "instead of --vocab/--merges: a Hugging Face tokenizer.json (e.g. Llama 3's or Llama 2's; "
                 "a prompt then starts with its <|begin_of_text|> or <s>)");
  sub.add_flag("--ids", a->print_ids, "print token ids instead of text (no tokenizer needed with --prompt-ids)");
  return std::function<int()>([a] {
    TRAINER_INPUT_CHECK(a->prompt.empty() || a->prompt_ids.empty(),
                        "sample: give --prompt or --prompt-ids, not both");
    TRAINER_INPUT_CHECK(a->options.temperature >= 0, "sample: --temperature must be >= 0, got {}",
                        a->options.temperature);
    TRAINER_INPUT_CHECK(a->options.tokens >= 1, "sample: --tokens must be at least 1, got {}",
                        a->options.tokens);
    std::vector<int32_t> prompt;
    if (!a->prompt_ids.empty()) prompt = parse_ids(a->prompt_ids);
    std::vector<int32_t> shown = prompt;  // the prompt as given, printed before the continuation
    const std::string step_dir = engine::checkpoint::resolve_checkpoint(a->source, stderr);
    const bool need_tokenizer = !(a->print_ids && !a->prompt_ids.empty());
    std::unique_ptr<engine::data::Tokenizer> tok;
    if (need_tokenizer)
      tok = std::make_unique<engine::data::Tokenizer>(
          a->tokenizer.empty() ? engine::data::Tokenizer::load(a->vocab, a->merges)
                               : engine::data::Tokenizer::load_hf(a->tokenizer));
    // Documents start as the data was tokenized: after <|endoftext|> (llm.c,
    // GPT-2), or with <|begin_of_text|> or <s> where the vocabulary has one
    // (Llama 3, SentencePiece).
    if (!a->prompt.empty()) {
      prompt = shown = tok->encode(a->prompt);
      if (tok->bos_id() >= 0) prompt.insert(prompt.begin(), tok->bos_id());
    } else if (a->prompt_ids.empty()) {
      const int start = tok->bos_id() >= 0 ? tok->bos_id() : tok->eot_id();
      TRAINER_INPUT_CHECK(start >= 0, "{}: has no <|endoftext|> token; give --prompt",
                          a->tokenizer.empty() ? a->vocab : a->tokenizer);
      prompt = {start};
    }
    if (tok && a->options.stop_id < 0) a->options.stop_id = tok->eot_id();
    std::vector<int32_t> out = engine::sample_continuation(step_dir, prompt, a->options);
    if (a->print_ids) {
      std::string line;
      for (size_t i = 0; i < out.size(); ++i) line += fmt::format("{}{}", i ? "," : "", out[i]);
      fmt::print("{}\n", line);
    } else if (!a->prompt_ids.empty()) {
      fmt::print("{}{}\n", tok->decode(shown), tok->decode(out));
    } else {
      // A document's text: SentencePiece's "▁" before it is not printed.
      shown.insert(shown.end(), out.begin(), out.end());
      fmt::print("{}\n", tok->decode_document(shown));
    }
    return 0;
  });
});

}  // namespace
}  // namespace trainer::cmd
