// engine/data/tokenizer: GPT-2's byte-level BPE (data/gpt2), a Llama 3
// tokenizer.json and Llama 2's SentencePiece-style one encode any bytes,
// valid UTF-8 or not, and decoding gives the same bytes back (tokenizer_checks.h);
// every id is in the vocabulary; a text cut at its safe point gives the same ids.
#include "test/fuzz/tokenizer_checks.h"

using namespace trainer;
using engine::data::Tokenizer;

namespace {
// Llama 3's tokenizer.json form (its Split pattern, ignore_merges, specials)
// over a tiny byte-level vocabulary.
const Tokenizer& llama3() {
  static const Tokenizer t =
      Tokenizer::load_hf(TRAINER_SOURCE_DIR "/test/data/fixtures/tiny_llama3_tokenizer.json");
  return t;
}
// Llama 2's tokenizer.json (the test fixture's reduced vocabulary).
const Tokenizer& llama2() {
  static const Tokenizer t =
      Tokenizer::load_hf(TRAINER_SOURCE_DIR "/test/data/fixtures/spm_llama2_tokenizer.json");
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  for (const Tokenizer* t : {&fuzz::gpt2_tokenizer(), &llama3(), &llama2()}) {
    fuzz::expect_only_input_errors([&] {
      const std::vector<int32_t> ids = fuzz::expect_round_trip(*t, text);
      if (size > 0 && ids.empty()) fuzz::fail("no ids for a non-empty text");
      fuzz::expect_safe_cut(*t, text, ids);
    });
  }
  return 0;
}
