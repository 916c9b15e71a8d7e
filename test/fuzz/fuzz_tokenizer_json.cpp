// engine/data/tokenizer_hf: any tokenizer.json text is refused with one line
// naming the file and key, or gives a tokenizer that round-trips bytes.
#include "engine/data/tokenizer.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_only_input_errors([&] {
    auto t = engine::data::Tokenizer::from_hf_text(fuzz::as_text(data, size), "fuzz tokenizer.json");
    for (std::string_view text : {"hello world", " \xff\xfe\n\n 12345 <|endoftext|>", ""}) {
      std::vector<int32_t> ids = t.encode(text);
      for (int32_t id : ids)
        if (id < 0 || id >= t.vocab_size()) fuzz::fail("id out of the vocabulary");
      // Ids of tokens the vocabulary lacks bytes for are refused by decode.
      std::string back = t.decode(ids);
      if (back != text) fuzz::fail("decode(encode(text)) != text");
    }
  });
  return 0;
}
