// What the tokenizer targets check on every tokenizer they accept: byte-level
// BPE is lossless, so encode then decode gives the bytes back, and every id is
// in the vocabulary. SentencePiece reads "▁" in the text as a space and puts
// one before a document, which decode_document takes off again (the Metaspace
// form puts none before a text that starts with a space, so that space is
// not given back). InputError (an id decode cannot map) passes through.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/data/normalize_nfc.h"
#include "engine/data/tokenizer.h"
#include "test/fuzz/fuzz_target.h"

namespace trainer::fuzz {

inline std::vector<int32_t> expect_round_trip(const engine::data::Tokenizer& t, std::string_view text) {
  std::vector<int32_t> ids = t.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) fail("id out of the vocabulary");
  if (t.pre_tokenizer() != engine::data::PreTokenizer::sentencepiece) {
    // An NFC normalizer (Qwen2) gives back the text in NFC.
    if (t.decode(ids) != (t.normalizes_nfc() ? engine::data::nfc(text) : std::string(text)))
      fail("decode(encode(text)) != text");
    return ids;
  }
  std::string spaced;
  for (size_t p = 0; p < text.size(); ++p) {
    const bool mark = text.compare(p, 3, "\xE2\x96\x81") == 0;
    spaced += mark ? ' ' : text[p];
    p += mark ? 2 : 0;
  }
  const std::string back = t.decode_document(ids);
  if (back != spaced && !(!spaced.empty() && spaced[0] == ' ' && back == spaced.substr(1)))
    fail("decode_document(encode(text)) != text");
  std::vector<int32_t> inner;  // not a document's start: no "▁" put first
  t.encode(text, inner, nullptr, false);
  if (t.decode(inner) != spaced) fail("decode(encode(text, not a document start)) != text");
  return ids;
}

// A text cut at its safe point: the part before encoded as a document's
// start, the rest not, gives the ids of the whole.
inline void expect_safe_cut(const engine::data::Tokenizer& t, std::string_view text,
                            const std::vector<int32_t>& whole) {
  const size_t cut = t.safe_cut(text);
  if (cut > text.size()) fail("safe_cut past the end");
  if (cut == 0) return;
  std::vector<int32_t> parts = t.encode(text.substr(0, cut));
  t.encode(text.substr(cut), parts, nullptr, false);
  if (parts != whole) fail("encoding at a safe cut differs from the whole");
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
