// What the tokenizer targets check on every tokenizer they accept: byte-level
// BPE is lossless, so encode then decode gives the bytes back, and every id is
// in the vocabulary. InputError (an id decode cannot map) passes through.
#pragma once

#include <string_view>
#include <vector>

#include "engine/data/tokenizer.h"
#include "test/fuzz/fuzz_target.h"

namespace trainer::fuzz {

inline std::vector<int32_t> expect_round_trip(const engine::data::Tokenizer& t, std::string_view text) {
  std::vector<int32_t> ids = t.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) fail("id out of the vocabulary");
  if (t.decode(ids) != text) fail("decode(encode(text)) != text");
  return ids;
}

// The sample texts a tokenizer built from fuzzed files must round-trip.
inline constexpr std::string_view kSampleTexts[] = {"hello world", " \xff\xfe\n\n 12345 <|endoftext|>",
                                                     "aaaa", ""};

// GPT-2's own vocabulary (data/gpt2), loaded once.
inline const engine::data::Tokenizer& gpt2_tokenizer() {
  static const engine::data::Tokenizer t = engine::data::Tokenizer::load(
      TRAINER_SOURCE_DIR "/data/gpt2/encoder.json", TRAINER_SOURCE_DIR "/data/gpt2/vocab.bpe");
  return t;
}

}  // namespace trainer::fuzz
