// Qwen2's tokenizer.json (NFC normalizer, Split on Qwen2's pattern, byte-level
// BPE) against the ids Hugging Face's tokenizers gives (fixtures written by
// make_qwen2_reference.js, checked there against @huggingface/tokenizers).
#include <fstream>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "engine/data/json_text.h"
#include "engine/data/normalize_nfc.h"
#include "engine/data/pretokenize_llama3.h"

using namespace trainer::engine::data;
using data_test::fixture;

TEST_CASE("Qwen2 tokenizer.json: Hugging Face's ids, NFC applied before the split", "[cpu]") {
  const Tokenizer tok = Tokenizer::load_hf(fixture("qwen2_tokenizer.json"));
  CHECK(tok.pre_tokenizer() == PreTokenizer::qwen2);
  CHECK(tok.normalizes_nfc());
  CHECK(tok.eot_id() == 151643);  // <|endoftext|>
  CHECK(tok.bos_id() == -1);      // Qwen's documents only end
  CHECK(tok.vocab_size() == 151665);
  WordCache cache(size_t(1) << 20);
  std::ifstream in(fixture("qwen2_reference.jsonl"));
  REQUIRE(in);
  std::string line, text, ids_text;
  int count = 0, normalized = 0, cut = 0;
  while (std::getline(in, line)) {
    REQUIRE(extract_string_field(line, "text", text, "fixture"));
    REQUIRE(extract_string_field(line, "ids", ids_text, "fixture"));
    INFO("text: " << text);
    const std::vector<int32_t> expected = data_test::parse_numbers(ids_text);
    CHECK(tok.encode(text) == expected);
    std::vector<int32_t> cached;
    tok.encode(text, cached, &cache);
    CHECK(cached == expected);
    // Byte-level: decoding gives the normalized text back.
    CHECK(tok.decode(expected) == nfc(text));
    normalized += nfc(text) != text;
    // `trainer tokenize` cuts long documents at safe_cut points: the parts'
    // ids joined are the whole text's.
    if (const size_t p = tok.safe_cut(text)) {
      std::vector<int32_t> parts;
      tok.encode(text.substr(0, p), parts, nullptr);
      tok.encode(text.substr(p), parts, nullptr, false);
      CHECK(parts == expected);
      ++cut;
    }
    ++count;
  }
  CHECK(count == 482);
  CHECK(normalized >= 20);
  CHECK(cut >= 50);
}

TEST_CASE("Qwen2's pattern: digits one at a time, the rest as Llama 3's", "[cpu]") {
  // Qwen's vocabulary has no multi-digit token, so the ids above cannot tell
  // \p{N} from \p{N}{1,3}: the pieces can.
  auto ends = [](const std::string& text, int max_digits) {
    std::vector<size_t> out;
    pretokenize_llama3(text, [&](size_t, size_t end) { out.push_back(end); }, max_digits);
    return out;
  };
  CHECK(ends("x12345 y", 1) == std::vector<size_t>{1, 2, 3, 4, 5, 6, 8});
  CHECK(ends("x12345 y", 3) == std::vector<size_t>{1, 4, 6, 8});
  CHECK(ends("I'm here\n\n", 1) == ends("I'm here\n\n", 3));
}
