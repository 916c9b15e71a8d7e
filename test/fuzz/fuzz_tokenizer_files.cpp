// engine/data/tokenizer: GPT-2's vocabulary files as `--vocab/--merges` give
// them (encoder.json or vocab.json, vocab.bpe or merges.txt) are refused with
// one line naming the file, or give a tokenizer that round-trips bytes.
//
// Input: bytes 0-1 = the vocabulary's length, then the vocabulary, then the merges.
#include "test/fuzz/tokenizer_checks.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  fuzz::InputCursor in(data, size);
  const std::string_view vocab = in.take_prefixed();
  const std::string_view merges = in.rest();
  fuzz::expect_only_input_errors([&] {
    auto t = engine::data::Tokenizer::from_text(vocab, merges, "vocab.json", "merges.txt");
    for (std::string_view text : fuzz::kSampleTexts) fuzz::expect_round_trip(t, text);
  });
  return 0;
}
