// engine/data/tokenizer_hf: any tokenizer.json text is refused with one line
// naming the file and key, or gives a tokenizer that round-trips bytes.
#include "test/fuzz/tokenizer_checks.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_only_input_errors([&] {
    auto t = engine::data::Tokenizer::from_hf_text(fuzz::as_text(data, size), "fuzz tokenizer.json");
    // Ids of tokens the vocabulary lacks bytes for are refused by decode.
    for (std::string_view text : fuzz::kSampleTexts) fuzz::expect_round_trip(t, text);
  });
  return 0;
}
