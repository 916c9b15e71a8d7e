// engine/data/tokenizer: GPT-2's byte-level BPE (data/gpt2) and a Llama 3
// tokenizer.json encode any bytes, valid UTF-8 or not, and decoding gives the
// same bytes back; every id is in the vocabulary.
#include "engine/data/tokenizer.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;
using engine::data::Tokenizer;

namespace {
const Tokenizer& gpt2() {
  static const Tokenizer t = Tokenizer::load(TRAINER_SOURCE_DIR "/data/gpt2/encoder.json",
                                             TRAINER_SOURCE_DIR "/data/gpt2/vocab.bpe");
  return t;
}

// Llama 3's tokenizer.json form (its Split pattern, ignore_merges, specials)
// over a tiny byte-level vocabulary.
const Tokenizer& llama3() {
  static const Tokenizer t =
      Tokenizer::load_hf(TRAINER_SOURCE_DIR "/test/data/fixtures/tiny_llama3_tokenizer.json");
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  for (const Tokenizer* t : {&gpt2(), &llama3()}) {
    fuzz::expect_only_input_errors([&] {
      std::vector<int32_t> ids = t->encode(text);
      for (int32_t id : ids)
        if (id < 0 || id >= t->vocab_size()) fuzz::fail("id out of the vocabulary");
      if (t->decode(ids) != text) fuzz::fail("decode(encode(text)) != text");
      if (size > 0 && ids.empty()) fuzz::fail("no ids for a non-empty text");
      size_t cut = t->safe_cut(text);
      if (cut > size) fuzz::fail("safe_cut past the end");
    });
  }
  return 0;
}
