// Hugging Face tokenizer.json: Llama 3's pre-tokenizer against JavaScript's
// regex engine on the committed strings (fixtures/llama3_pieces.jsonl), its
// safe cut points, ignore_merges, added tokens as document delimiters, the
// tokenizer.json forms read, and the refusals naming the file and key.
#include <random>

#include "data_test_util.h"
#include "engine/data/json_text.h"
#include "engine/data/megatron_format.h"
#include "engine/data/pretokenize_llama3.h"
#include "engine/data/tokenize_corpus.h"
#include "engine/json.h"

using namespace trainer::engine;
using namespace trainer::engine::data;
using data_test::fixture;
using data_test::require_input_error;

namespace {

// fixtures/tiny_llama3_tokenizer.json (the tiny vocabulary with Llama 3's
// pre-tokenizer and specials), varied: ignore_merges on or off, merges as
// ["a", "b"] pairs, `extra` vocabulary tokens, GPT-2's pre-tokenizer.
std::string tiny_tokenizer_json(bool ignore_merges, bool pairs = false,
                                const std::vector<std::pair<std::string, int>>& extra = {},
                                bool gpt2_pre = false) {
  const std::string name = fixture("tiny_llama3_tokenizer.json");
  Json j = parse_json(data_test::read_file(name), name);
  Json model = j.at("model"), vocab = model.at("vocab"), merges = Json::array();
  for (const auto& [token, id] : extra) vocab.set(token, Json(id));
  for (const Json& m : model.at("merges").items()) {
    const std::string& line = m.as_string();
    Json pair = Json::array();
    pair.push(Json(line.substr(0, line.find(' '))));
    pair.push(Json(line.substr(line.find(' ') + 1)));
    merges.push(pairs ? std::move(pair) : m);
  }
  model.set("ignore_merges", Json(ignore_merges));
  model.set("vocab", std::move(vocab));
  model.set("merges", std::move(merges));
  j.set("model", std::move(model));
  if (gpt2_pre)
    j.set("pre_tokenizer", parse_json(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})",
                                      "pre_tokenizer"));
  return j.dump();
}

}  // namespace

TEST_CASE("llama3 pre-tokenizer: the pieces JavaScript's regex gives", "[cpu]") {
  std::ifstream in(fixture("llama3_pieces.jsonl"));
  std::string line, text, ends_text;
  int count = 0;
  while (std::getline(in, line)) {
    REQUIRE(extract_string_field(line, "text", text, "fixture"));
    REQUIRE(extract_string_field(line, "ends", ends_text, "fixture"));
    std::vector<size_t> ends;
    pretokenize_llama3(text, [&](size_t, size_t end) { ends.push_back(end); });
    INFO("text: " << text);
    CHECK(ends == data_test::parse_numbers<size_t>(ends_text));
    ++count;
  }
  CHECK(count >= 700);
}

TEST_CASE("tokenizer.json: Llama 3's pattern, ignore_merges, specials as document delimiters",
          "[cpu]") {
  // "xyz" is in the vocabulary but no merge builds it: ignore_merges takes it whole.
  const Tokenizer whole = Tokenizer::from_hf_text(
      tiny_tokenizer_json(true, false, {{"xyz", 290}}), "tokenizer.json");
  const Tokenizer merged = Tokenizer::from_hf_text(
      tiny_tokenizer_json(false, true, {{"xyz", 290}}), "tokenizer.json");
  CHECK(whole.pre_tokenizer() == PreTokenizer::llama3);
  CHECK(whole.encode("xyz") == std::vector<int32_t>{290});
  CHECK(merged.encode("xyz") == std::vector<int32_t>{'x', 'y', 'z'});  // ids 0-255 are the bytes
  CHECK(whole.encode(" xyz").size() == 4);  // " xyz" is the piece, and not in the vocabulary
  CHECK(whole.bos_id() == 300);
  CHECK(whole.eot_id() == 301);
  CHECK(whole.vocab_size() == 302);
  // Merges as pairs read as merges as strings (tokenizers >= 0.20 writes pairs).
  const Tokenizer strings = Tokenizer::from_hf_text(tiny_tokenizer_json(false), "t.json");
  for (const char* s : {"hello world", "the world, hello!\n\nab aaaa"}) CHECK(merged.encode(s) == strings.encode(s));
  // Where the patterns differ: GPT-2 splits ",hello" in two, Llama 3 keeps it whole.
  const Tokenizer gpt2 = Tokenizer::from_hf_text(tiny_tokenizer_json(false, false, {}, true), "t.json");
  CHECK(gpt2.pre_tokenizer() == PreTokenizer::gpt2);
  CHECK(gpt2.encode("hello world") == data_test::tiny_tokenizer().encode("hello world"));
  std::vector<size_t> g, l;
  pretokenize(",hello 12345", [&](size_t, size_t e) { g.push_back(e); });
  pretokenize_llama3(",hello 12345", [&](size_t, size_t e) { l.push_back(e); });
  CHECK(g == std::vector<size_t>{1, 6, 12});
  CHECK(l == std::vector<size_t>{6, 7, 10, 12});

  // A Megatron dataset: <|begin_of_text|> + ids + <|end_of_text|> per document.
  data_test::TempDir dir;
  data_test::write_file(dir / "a.txt", "hello world");
  TokenizeOptions opt;
  opt.inputs = {dir / "a.txt"};
  opt.out_prefix = dir / "meg";
  opt.format = OutputFormat::megatron;
  opt.threads = 1;
  tokenize_corpus(opt, whole);
  MappedFile idx(dir / "meg.idx"), bin(dir / "meg.bin");
  MegatronIndex index;
  TokenStream s = open_megatron(idx, bin, &index);
  std::vector<int32_t> got(s.num_tokens), want = whole.encode("hello world");
  read_tokens(s, 0, static_cast<int>(got.size()), 1000, got.data());
  want.insert(want.begin(), 300);
  want.push_back(301);
  CHECK(got == want);
}

TEST_CASE("llama3 pre-tokenizer: text cut at a safe point tokenizes as a whole", "[cpu]") {
  const Tokenizer tok = Tokenizer::from_hf_text(tiny_tokenizer_json(true), "t.json");
  std::mt19937 rng(7);
  int cuts = 0;
  for (int k = 0; k < 3000; ++k) {
    std::string s(2 + rng() % 60, '\0');
    for (char& c : s) c = "  \n\n\tab'.!1,\r\xC2\xA0"[rng() % 15];
    const size_t cut = tok.safe_cut(s.substr(0, 1 + rng() % (s.size() - 1)));
    if (cut == 0) continue;
    ++cuts;
    auto whole = tok.encode(s), parts = tok.encode(s.substr(0, cut)), rest = tok.encode(s.substr(cut));
    parts.insert(parts.end(), rest.begin(), rest.end());
    INFO("text: " << s << " cut " << cut);
    REQUIRE(parts == whole);
  }
  CHECK(cuts > 1000);
  // GPT-2's rule would cut "!\n" apart, which Llama 3 keeps in one piece.
  CHECK(find_safe_cut("a!\nb") == 2);
  CHECK(find_safe_cut_llama3("a!\nb") == 0);
}

TEST_CASE("tokenizer.json: what would tokenize differently is refused by its key", "[cpu]") {
  const std::string good = tiny_tokenizer_json(true);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  require_input_error([&] { Tokenizer::from_hf_text(with("\"BPE\"", "\"Unigram\""), "tok.json"); },
                      {"tok.json: model.type: is \"Unigram\", expected \"BPE\""});
  require_input_error([&] { Tokenizer::from_hf_text(with("\\\\p{N}{1,3}", "\\\\p{N}+"), "tok.json"); },
                      {"tok.json: pre_tokenizer: neither GPT-2's ByteLevel regex nor Llama 3's"});
  require_input_error([&] { Tokenizer::from_hf_text(with("\"normalizer\":null", "\"normalizer\":{\"type\":\"NFKC\"}"),
                                                    "tok.json"); },
                      {"tok.json: normalizer: is {\"type\":\"NFKC\"}; only none and NFC"});
  require_input_error([&] { Tokenizer::from_hf_text(with("\"byte_fallback\":false", "\"byte_fallback\":true"),
                                                    "tok.json"); },
                      {"tok.json: model.byte_fallback"});
  require_input_error([&] { Tokenizer::from_hf_text(with("\"h e\"", "7"), "tok.json"); },
                      {"tok.json: model.merges: entry 7"});
  require_input_error([&] { Tokenizer::from_hf_text(with("\"h e\"", "\"h q\""), "tok.json"); },
                      {"tok.json model.merges", "not in the vocabulary"});
  // An added token's id must fit an int32 (3e20 once escaped as_int as a
  // runtime_error, exit 1: found by test/fuzz/fuzz_tokenizer_json).
  for (const char* id : {"3e20", "1.5", "-1", "\"300\""})
    require_input_error([&] { Tokenizer::from_hf_text(with("\"id\":300", std::string("\"id\":") + id), "tok.json"); },
                        {"tok.json: added_tokens: entry", "needs an integer id in [0, 2^31) and a content string"});
  require_input_error([&] { Tokenizer::load_hf("/nonexistent/tokenizer.json"); },
                      {"/nonexistent/tokenizer.json: cannot read tokenizer.json"});
}
