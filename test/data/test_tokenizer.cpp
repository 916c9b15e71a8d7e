// Tokenizer tests: the pre-tokenizer, merges by rank, GPT-2 reference ids,
// exact decode, vocabulary errors, JSON strings.
#include <cstdio>
#include <random>

#include "data_test_util.h"
#include "engine/data/json_text.h"
#include "engine/data/pretokenize.h"

using namespace trainer::engine::data;
using data_test::fixture;
using data_test::require_input_error;
using data_test::tiny_tokenizer;

namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  pretokenize(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}

}  // namespace

TEST_CASE("pre-tokenizer splits like GPT-2's regex", "[cpu]") {
  using V = std::vector<std::string>;
  CHECK(pieces("Hello  world") == V{"Hello", " ", " world"});
  CHECK(pieces("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(pieces("don't stop") == V{"don", "'t", " stop"});
  CHECK(pieces("they're we've I'll he'd") == V{"they", "'re", " we", "'ve", " I", "'ll", " he", "'d"});
  CHECK(pieces("x   ") == V{"x", "   "});
  CHECK(pieces("  hi") == V{" ", " hi"});
  CHECK(pieces("3.14") == V{"3", ".", "14"});
  CHECK(pieces("abc123def") == V{"abc", "123", "def"});
  CHECK(pieces(" !!x") == V{" !!", "x"});
  CHECK(pieces("a\t b") == V{"a", "\t", " b"});
  CHECK(pieces("''s") == V{"''", "s"});
  CHECK(pieces("\xC3\xA9\xE4\xB8\xAD\xE6\x96\x87 x") == V{"\xC3\xA9\xE4\xB8\xAD\xE6\x96\x87", " x"});
  CHECK(pieces("\xFF\xFE" "ab") == V{"\xFF\xFE", "ab"});  // invalid UTF-8: `other` bytes
  CHECK(pieces("").empty());
}

TEST_CASE("tiny vocabulary: merges applied by rank, GPT-2's pass semantics", "[cpu]") {
  const Tokenizer& tok = tiny_tokenizer();
  CHECK(tok.vocab_size() == 273);
  CHECK(tok.eot_id() == 272);
  CHECK(tok.num_merges() == 16);
  // Worked out by hand from tiny_merges.txt (ranks 0..15, ids 256..271).
  CHECK(tok.encode(" the world") == std::vector<int32_t>{259, 264});
  CHECK(tok.encode("hello") == std::vector<int32_t>{266});
  // a a a a a: pass 1 merges (a,a) left to right -> aa aa a; then (aa,a) ranks
  // below (aa,aa) -> aa aaa.
  CHECK(tok.encode("aaaaa") == std::vector<int32_t>{267, 268});
  CHECK(tok.encode("aba") == std::vector<int32_t>{271});
  CHECK(tok.encode("abab a") == std::vector<int32_t>{270, 270, ' ', 'a'});
  CHECK(tok.encode("<|endoftext|>") == std::vector<int32_t>{'<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'});
}

TEST_CASE("long pieces: the heap merge equals GPT-2's loop", "[cpu]") {
  const Tokenizer& tok = tiny_tokenizer();
  std::mt19937 rng(7);
  const std::string alphabet = "aaab";
  for (int trial = 0; trial < 300; ++trial) {
    std::string piece(65 + rng() % 300, 'a');
    for (char& c : piece) c = alphabet[rng() % alphabet.size()];
    std::vector<int32_t> fast, ref;
    tok.encode_piece(piece, fast);
    tok.encode_piece_reference(piece, ref);
    REQUIRE(fast == ref);
    REQUIRE(tok.decode(fast) == piece);
  }
}

TEST_CASE("decode(encode(s)) == s for any bytes", "[cpu]") {
  const Tokenizer& tok = tiny_tokenizer();
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = static_cast<char>(trial % 2 ? rng() % 256 : " \n\tabhelowrd'\xC3\xA9"[rng() % 15]);
    REQUIRE(tok.decode(tok.encode(s)) == s);
  }
}

TEST_CASE("text cut at a safe point tokenizes as the whole", "[cpu]") {
  const Tokenizer& tok = tiny_tokenizer();
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(2 + rng() % 80, '\0');
    for (char& c : s) c = "  \n\n\tab'.!1\xC2\xA0"[rng() % 13];
    size_t cut = find_safe_cut(s.substr(0, 1 + rng() % (s.size() - 1)));
    if (cut == 0) continue;
    auto whole = tok.encode(s);
    auto parts = tok.encode(s.substr(0, cut));
    auto rest = tok.encode(s.substr(cut));
    parts.insert(parts.end(), rest.begin(), rest.end());
    REQUIRE(parts == whole);
  }
}

TEST_CASE("GPT-2 reference ids on the committed strings", "[cpu]") {
  // The fixture's ids come from OpenAI's encoder as ported in the npm package
  // gpt-3-encoder, run once with node (see fixtures/make_gpt2_reference.js).
  const std::string vocab = std::string(TRAINER_SOURCE_DIR) + "/data/gpt2/encoder.json";
  const std::string merges = std::string(TRAINER_SOURCE_DIR) + "/data/gpt2/vocab.bpe";
  if (!std::ifstream(vocab) || !std::ifstream(merges)) {
    std::printf("SKIPPED: GPT-2 reference ids: %s is missing (run scripts/get_data.sh)\n", vocab.c_str());
    WARN("skipped: " << vocab << " missing; run scripts/get_data.sh");
    return;
  }
  const Tokenizer tok = Tokenizer::load(vocab, merges);
  CHECK(tok.vocab_size() == 50257);
  CHECK(tok.eot_id() == 50256);
  CHECK(tok.num_merges() == 50000);
  std::ifstream in(fixture("gpt2_reference.jsonl"));
  std::string line, text, ids_text;
  int count = 0;
  WordCache cache;
  while (std::getline(in, line)) {
    REQUIRE(extract_string_field(line, "text", text, "fixture"));
    REQUIRE(extract_string_field(line, "ids", ids_text, "fixture"));
    const std::vector<int32_t> expected = data_test::parse_numbers(ids_text);
    INFO("text: " << text);
    CHECK(tok.encode(text) == expected);
    std::vector<int32_t> cached;
    tok.encode(text, cached, &cache);
    CHECK(cached == expected);
    CHECK(tok.decode(expected) == text);
    ++count;
  }
  CHECK(count >= 200);
}

TEST_CASE("vocabulary errors name the file and place", "[cpu]") {
  data_test::TempDir dir;
  const std::string merges = data_test::read_file(fixture("tiny_merges.txt"));
  const std::string vocab = data_test::read_file(fixture("tiny_vocab.json"));
  require_input_error([&] { Tokenizer::load(dir / "missing.json", fixture("tiny_merges.txt")); },
                      {"missing.json", "cannot read vocabulary"});
  require_input_error([&] { Tokenizer::load(fixture("tiny_vocab.json"), dir / "nope.txt"); },
                      {"nope.txt", "cannot read merges"});
  // Line 3 of the merges has three tokens.
  std::string bad = "#version: 0.2\nh e\nl l x\n";
  require_input_error([&] { Tokenizer::from_text(vocab, bad, "v.json", "m.txt"); },
                      {"m.txt", "line 3", "byte offset 18", "two tokens"});
  require_input_error([&] { Tokenizer::from_text(vocab, "h e\nq zz\n", "v.json", "m.txt"); },
                      {"m.txt", "line 2", "not in the vocabulary"});
  require_input_error([&] { Tokenizer::from_text("{\"a\": 0, \"b\" 1}", merges, "v.json", "m.txt"); },
                      {"v.json", "byte offset 13", "':'"});
  require_input_error([&] { Tokenizer::from_text("{\"a\": 0}", merges, "v.json", "m.txt"); },
                      {"v.json", "byte 0x00"});
  require_input_error([&] { Tokenizer::from_text("", merges, "v.json", "m.txt"); }, {"v.json", "byte offset 0"});
  require_input_error([&] { Tokenizer::from_text(R"({"a": 1.5})", merges, "v.json", "m.txt"); },
                      {"v.json", "byte offset 6", "integer", "1.5"});
  require_input_error([&] { Tokenizer::from_text(R"({"a": 99999999})", merges, "v.json", "m.txt"); },
                      {"v.json", "99999999", "2^24"});
  require_input_error([&] { Tokenizer::from_text(R"({"a": 1, "b": 1})", merges, "v.json", "m.txt"); },
                      {"v.json", "id 1 is given to two tokens"});
  require_input_error([&] { tiny_tokenizer().decode(std::vector<int32_t>{1, 999}); }, {"999", "position 1"});
}

TEST_CASE("JSON string fields: escapes and surrogate pairs", "[cpu]") {
  std::string out;
  REQUIRE(extract_string_field(R"({"id": 3, "meta": {"a": [1, "x"]}, "text": "a\"b\\c\n\u00e9\ud83d\ude00/\/"})",
                               "text", out, "f"));
  CHECK(out == "a\"b\\c\n\xC3\xA9\xF0\x9F\x98\x80//");
  CHECK_FALSE(extract_string_field(R"({"body": "x"})", "text", out, "f"));
  require_input_error([&] { extract_string_field(R"({"text": 5})", "text", out, "f.jsonl: line 2"); },
                      {"f.jsonl: line 2", "byte offset 9", "string value"});
  require_input_error([&] { extract_string_field("not json", "text", out, "g.jsonl: line 7"); },
                      {"g.jsonl: line 7", "byte offset 0"});
  // Skipped fields are checked as strictly as the one read; raw control characters are refused.
  require_input_error([&] { extract_string_field(R"({"meta": [1,], "text": "x"})", "text", out, "h"); },
                      {"h", "byte offset 12", "unexpected character ']'"});
  require_input_error([&] { extract_string_field("{\"text\": \"a\tb\"}", "text", out, "h"); },
                      {"h", "byte offset 11", "control character"});
  require_input_error([&] { extract_string_field(R"({"text": "\ud800"})", "text", out, "h"); },
                      {"h", "unpaired surrogate"});
  require_input_error([&] { extract_string_field(R"({"text": "x"} 1)", "text", out, "h"); },
                      {"h", "byte offset 14", "after the value"});
}

TEST_CASE("ASCII class table agrees with the generated Unicode tables", "[cpu]") {
  for (uint32_t cp = 0; cp < 128; ++cp) REQUIRE(char_class(cp) == char_class_slow(cp));
  CHECK(char_class(0x4E2D) == CharClass::letter);   // 中
  CHECK(char_class(0x0663) == CharClass::number);   // ٣
  CHECK(char_class(0x3000) == CharClass::space);    // ideographic space
  CHECK(char_class(0x1F600) == CharClass::other);   // 😀
}

TEST_CASE("Hugging Face style merges.txt: no #version line, CRLF line ends", "[cpu]") {
  const std::string vocab = data_test::read_file(fixture("tiny_vocab.json"));
  std::string merges = data_test::read_file(fixture("tiny_merges.txt"));
  merges.erase(0, merges.find('\n') + 1);  // drop "#version: 0.2"
  std::string crlf;
  for (char c : merges) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  const Tokenizer hf = Tokenizer::from_text(vocab, crlf, "vocab.json", "merges.txt");
  CHECK(hf.num_merges() == 16);
  for (const char* s : {" the world", "hello", "aaaaa", "abab a"}) CHECK(hf.encode(s) == tiny_tokenizer().encode(s));
}
