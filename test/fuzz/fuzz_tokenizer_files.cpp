// engine/data/tokenizer: GPT-2's vocabulary files as `--vocab/--merges` give
// them (encoder.json or vocab.json, vocab.bpe or merges.txt) are refused with
// one line naming the file, or give a tokenizer that round-trips bytes.
//
// Input: bytes 0-1 = the vocabulary's length, then the vocabulary, then the merges.
#include "engine/data/tokenizer.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t vocab_len = std::min<size_t>(data[0] | data[1] << 8, size - 2);
  const std::string_view vocab = fuzz::as_text(data + 2, vocab_len);
  const std::string_view merges = fuzz::as_text(data + 2 + vocab_len, size - 2 - vocab_len);
  fuzz::expect_only_input_errors([&] {
    auto t = engine::data::Tokenizer::from_text(vocab, merges, "vocab.json", "merges.txt");
    for (std::string_view text : {"hello world", " \xff\xfe\n\n 12345 <|endoftext|>", "aaaa"}) {
      std::vector<int32_t> ids = t.encode(text);
      for (int32_t id : ids)
        if (id < 0 || id >= t.vocab_size()) fuzz::fail("id out of the vocabulary");
      if (t.decode(ids) != text) fuzz::fail("decode(encode(text)) != text");
    }
  });
  return 0;
}
