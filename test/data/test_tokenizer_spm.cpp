// SentencePiece-style BPE tokenizer.json (Llama 2's, Mistral's): the ids
// Hugging Face's tokenizers gives on the committed strings in the legacy and
// Metaspace forms, its merge order, byte fallback, decode, safe cuts, <s> and
// </s> around each Megatron document, and the refusals naming file and key.
#include <random>

#include "data_test_util.h"
#include "engine/data/json_text.h"
#include "engine/data/megatron_format.h"
#include "engine/data/tokenize_corpus.h"
#include "engine/data/tokenizer_spm.h"
#include "engine/json.h"

using namespace trainer::engine;
using namespace trainer::engine::data;
using data_test::fixture;
using data_test::require_input_error;

namespace {

// fixtures/spm_<model>_tokenizer.json (Llama 2's or Mistral's tokenizer.json
// reduced to the fixture strings' tokens), as shipped ("legacy") or in a
// Metaspace form as newer files have it.
std::string spm_json(const std::string& model, const std::string& form = "legacy") {
  const std::string name = fixture("spm_" + model + "_tokenizer.json");
  const std::string text = data_test::read_file(name);
  if (form == "legacy") return text;
  Json j = parse_json(text, name);
  j.set("normalizer", Json());
  const bool split = form == "always_split";
  const std::string scheme = form == "old_metaspace" ? "" : split ? "always" : "first";
  Json pre = parse_json(R"({"type": "Metaspace", "replacement": "▁"})", "pre_tokenizer");
  if (scheme.empty()) pre.set("add_prefix_space", Json(true));
  if (!scheme.empty()) {
    pre.set("prepend_scheme", Json(scheme));
    pre.set("split", Json(split));
  }
  j.set("pre_tokenizer", std::move(pre));
  return j.dump();
}

Tokenizer spm(const std::string& model, const std::string& form = "legacy") {
  return Tokenizer::from_hf_text(spm_json(model, form), model + " tokenizer.json");
}

// What decode_document(encode(text)) gives: "▁" in the text reads as a space,
// and the Metaspace form puts no "▁" before a text that starts with a space.
std::string as_decoded(const std::string& text, bool legacy) {
  std::string out;
  for (size_t p = 0; p < text.size();) {
    const size_t mark = spm_space_len(text, p);
    out += mark ? std::string(" ") : text.substr(p, 1);
    p += mark ? mark : 1;
  }
  if (!legacy && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

// A hand-made SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens
// (ids 3-258), then `tokens` from 259 on; merges "a b" in rank order.
Tokenizer tiny_spm(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
                   SpmForm form = {}) {
  std::vector<std::pair<std::string, int64_t>> vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab.emplace_back(fmt::format("<0x{:02X}>", b), 3 + b);
  for (const std::string& t : tokens) vocab.emplace_back(t, static_cast<int64_t>(vocab.size()));
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& m : merges) pairs.emplace_back(m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1));
  return Tokenizer::from_spm(vocab, {}, pairs, form, "<unk>", "tiny");
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("SentencePiece tokenizer.json: Hugging Face's ids for Llama 2 and Mistral, legacy and Metaspace forms",
          "[cpu]") {
  // Written by Hugging Face's tokenizers (and checked against transformers.js's
  // @huggingface/tokenizers) with fixtures/make_spm_reference.js.
  struct Form {
    const char* field;
    Tokenizer tok;
    bool legacy;
    WordCache cache = WordCache(size_t(1) << 20);  // a cache serves one tokenizer
  };
  std::vector<Form> forms;
  forms.push_back({"llama2", spm("llama2"), true});
  forms.push_back({"mistral", spm("mistral"), true});
  forms.push_back({"mistral_first", spm("mistral", "first"), false});
  forms.push_back({"mistral_always_split", spm("mistral", "always_split"), false});
  const Tokenizer old_metaspace = spm("mistral", "old_metaspace");
  CHECK(forms[0].tok.pre_tokenizer() == PreTokenizer::sentencepiece);
  CHECK(forms[0].tok.bos_id() == 1);
  CHECK(forms[0].tok.eot_id() == 2);
  CHECK(forms[0].tok.unk_id() == 0);
  CHECK(forms[0].tok.vocab_size() == 32000);
  std::ifstream in(fixture("spm_reference.jsonl"));
  std::string line, text, ids_text, mistral_ids;
  int count = 0, differing = 0;
  while (std::getline(in, line)) {
    REQUIRE(extract_string_field(line, "text", text, "fixture"));
    REQUIRE(extract_string_field(line, "mistral", mistral_ids, "fixture"));
    INFO("text: " << text);
    for (Form& f : forms) {
      // A Metaspace form's ids are left out where they are the legacy form's.
      if (!extract_string_field(line, f.field, ids_text, "fixture")) ids_text = mistral_ids;
      else differing += !f.legacy;
      const std::vector<int32_t> expected = data_test::parse_numbers(ids_text);
      INFO("form: " << f.field);
      CHECK(f.tok.encode(text) == expected);
      std::vector<int32_t> cached;
      f.tok.encode(text, cached, &f.cache);
      CHECK(cached == expected);
      CHECK(f.tok.decode_document(expected) == as_decoded(text, f.legacy));
      if (std::string(f.field) == "mistral_always_split") CHECK(old_metaspace.encode(text) == expected);
    }
    ++count;
  }
  CHECK(count >= 500);
  CHECK(differing >= 50);  // the forms do differ on these strings
}

TEST_CASE("SentencePiece: Hugging Face's merge order (lowest rank, leftmost, new pairs at once), byte fallback",
          "[cpu]") {
  // "ab a" ranks before "a b": in "abab" the first "ab" made joins the "a"
  // after it before the second "a b" is merged. GPT-2's passes would merge
  // every "a b" first: ab ab.
  const Tokenizer tok = tiny_spm({"\xE2\x96\x81", "a", "b", "ab", "aba"}, {"ab a", "a b"});
  const int32_t space = 259, a = 260, b = 261, ab = 262, aba = 263;
  std::vector<int32_t> ids;
  tok.encode_piece("abab", ids);
  CHECK(ids == std::vector<int32_t>{aba, b});
  // The same order on the heap (pieces over 64 bytes) and in the reference loop.
  std::string longer;
  for (int i = 0; i < 20; ++i) longer += "abab";
  std::vector<int32_t> heap, loop, want;
  tok.encode_piece(longer, heap);
  tok.encode_piece_reference(longer, loop);
  for (int i = 0; i < 20; ++i) want.insert(want.end(), {aba, b});
  CHECK(heap == want);
  CHECK(loop == want);
  // A space is "▁"; the document's "▁" comes first; "c" and "é" are not in
  // the vocabulary: their UTF-8 bytes' tokens (<0x63> = 3 + 0x63).
  CHECK(tok.encode("ab c") == std::vector<int32_t>{space, ab, space, 3 + 0x63});
  CHECK(tok.encode("\xC3\xA9") == std::vector<int32_t>{space, 3 + 0xC3, 3 + 0xA9});
  ids.clear();
  tok.encode("ab c", ids, nullptr, false);  // not a document's start: no "▁" first
  CHECK(ids == std::vector<int32_t>{ab, space, 3 + 0x63});
  CHECK(tok.encode("") == std::vector<int32_t>{});
  CHECK(tok.encode("a") == std::vector<int32_t>{space, a});
  // Invalid UTF-8 takes its bytes' tokens too, so decode gives the bytes back.
  const std::string bad = "a\xFF\xE2\x96 b\xC3";
  CHECK(tok.decode_document(tok.encode(bad)) == bad);
}

TEST_CASE("SentencePiece: the heap merge equals the quadratic loop on long pieces", "[cpu]") {
  const Tokenizer tok = spm("mistral");
  std::mt19937 rng(3);
  const std::vector<std::string> alphabet = {"a", "e", "i", "n", "r", "s", "t", "l", "h", "o", "T", "H", "E",
                                             " ", "\xE2\x96\x81", "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "'"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string piece;
    while (piece.size() <= 64 + rng() % 300) piece += alphabet[rng() % (trial % 2 ? alphabet.size() : 13)];
    std::vector<int32_t> fast, ref;
    tok.encode_piece(piece, fast);
    tok.encode_piece_reference(piece, ref);
    INFO("piece: " << piece);
    REQUIRE(fast == ref);
  }
}

TEST_CASE("SentencePiece: text cut at a safe point tokenizes as the whole", "[cpu]") {
  // A cut changes where "▁" is put: the part after it is no document's start.
  const Tokenizer legacy = spm("llama2");
  CHECK(legacy.safe_cut("hello world") == 5);
  CHECK(concat(legacy.encode("hello"), legacy.encode(" world")) != legacy.encode("hello world"));
  std::vector<int32_t> parts = legacy.encode("hello");
  legacy.encode(" world", parts, nullptr, false);
  CHECK(parts == legacy.encode("hello world"));
  // Only a space starts a piece: a line break is no cut (a vocabulary may
  // join it to the text before it, as this one does).
  CHECK(find_safe_cut_spm("a!\nb") == 0);
  CHECK(find_safe_cut_spm("a!\n b") == 0);
  CHECK(find_safe_cut_spm("a! b") == 2);
  const Tokenizer joins = tiny_spm({"\xE2\x96\x81", "a", "\n", "a\n", "\xE2\x96\x81" "a"}, {"a \n", "\xE2\x96\x81 a"});
  std::mt19937 rng(9);
  int cuts = 0;
  const Tokenizer split = spm("mistral", "always_split");
  for (const Tokenizer* tok : {&legacy, &joins, &split}) {
    for (int k = 0; k < 2000; ++k) {
      std::string s(2 + rng() % 60, '\0');
      for (char& c : s) c = "  \n\tab.!1'"[rng() % 10];
      const size_t cut = tok->safe_cut(s.substr(0, 1 + rng() % (s.size() - 1)));
      if (cut == 0) continue;
      ++cuts;
      std::vector<int32_t> ids = tok->encode(s.substr(0, cut));
      tok->encode(s.substr(cut), ids, nullptr, false);
      INFO("text: " << s << " cut " << cut);
      REQUIRE(ids == tok->encode(s));
    }
  }
  CHECK(cuts > 2000);
}

TEST_CASE("SentencePiece: decode_document(encode(s)) gives s back, any bytes", "[cpu]") {
  std::mt19937 rng(13);
  for (const char* form : {"legacy", "first", "always_split"}) {
    const Tokenizer tok = spm("mistral", form);
    const bool legacy = std::string(form) == "legacy";
    for (int trial = 0; trial < 300; ++trial) {
      std::string s(rng() % 100, '\0');
      for (char& c : s) c = static_cast<char>(trial % 2 ? rng() % 256 : " \n\tHello\xE2\x96\x81"[rng() % 11]);
      INFO("form " << form << " text: " << s);
      REQUIRE(tok.decode_document(tok.encode(s)) == as_decoded(s, legacy));
    }
  }
  // decode itself keeps the document's "▁" (decode(a) + decode(b) == decode(a + b)).
  const Tokenizer tok = spm("llama2");
  CHECK(tok.decode(tok.encode("Hello world")) == " Hello world");
  CHECK(tok.decode_document(tok.encode(" Hello")) == " Hello");
}

TEST_CASE("SentencePiece: trainer tokenize writes <s> ... </s> per Megatron document, cut anywhere safe", "[cpu]") {
  const Tokenizer tok = spm("llama2");
  data_test::TempDir dir;
  std::mt19937 rng(4);
  const char* words[] = {"Hello", "world", "The", "jury", "said", "\xE6\x97\xA5\xE6\x9C\xAC", "\n", "42", "  "};
  std::string doc;
  while (doc.size() < 20000) doc += std::string(words[rng() % 9]) + (rng() % 3 ? " " : "");
  data_test::write_file(dir / "a.txt", doc);
  data_test::write_file(dir / "b.jsonl", "{\"text\": \" leading space\"}\n{\"text\": \"x\"}\n");
  const std::vector<int32_t> want = concat(concat({1}, tok.encode(doc)), {2, 1});
  const std::vector<int32_t> tail = concat(concat(tok.encode(" leading space"), {2, 1}), concat(tok.encode("x"), {2}));
  for (size_t item_bytes : {size_t(1) << 20, size_t(16), size_t(100)})
    for (int threads : {1, 3}) {
      TokenizeOptions opt;
      opt.inputs = {dir / "a.txt", dir / "b.jsonl"};
      opt.out_prefix = dir / fmt::format("m{}_{}", item_bytes, threads);
      opt.format = OutputFormat::megatron;
      opt.threads = threads;
      opt.item_bytes = item_bytes;
      tokenize_corpus(opt, tok);
      MappedFile idx(opt.out_prefix + ".idx"), bin(opt.out_prefix + ".bin");
      MegatronIndex index;
      TokenStream s = open_megatron(idx, bin, &index);
      std::vector<int32_t> got(s.num_tokens);
      read_tokens(s, 0, static_cast<int>(got.size()), tok.vocab_size(), got.data());
      INFO("item_bytes " << item_bytes << " threads " << threads);
      REQUIRE(got == concat(want, tail));
    }
}

TEST_CASE("SentencePiece tokenizer.json: what would tokenize differently is refused by its key", "[cpu]") {
  const std::string legacy = spm_json("mistral"), first = spm_json("mistral", "first");
  auto with = [](std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  auto refused = [](const std::string& json, std::vector<std::string> parts) {
    INFO("expected: " << parts.front());
    require_input_error([&] { Tokenizer::from_hf_text(json, "tok.json"); }, parts);
  };
  const std::string normalizer = "\"normalizer\":{\"type\":\"Sequence\"";
  refused(with(legacy, normalizer, "\"normalizer\":{\"type\":\"NFKC\"},\"x\":{\"type\":\"Sequence\""),
          {"tok.json: normalizer: is {\"type\":\"NFKC\"}"});
  refused(with(legacy, "\"prepend\":\"▁\"", "\"prepend\":\" \""), {"tok.json: normalizer: is"});
  refused(with(legacy, "\"pre_tokenizer\":null", "\"pre_tokenizer\":{\"type\":\"Metaspace\"}"),
          {"tok.json: pre_tokenizer: is {\"type\":\"Metaspace\"}; with the Prepend + Replace normalizer"});
  refused(with(first, "\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}"), {"tok.json: normalizer: is"});
  refused(with(legacy, normalizer, "\"normalizer\":null,\"x\":{\"type\":\"Sequence\""),
          {"tok.json: pre_tokenizer: is null; expected", "SentencePiece's Metaspace"});
  refused(with(first, "\"replacement\":\"▁\"", "\"replacement\":\"_\""), {"tok.json: pre_tokenizer.replacement"});
  refused(with(first, "\"prepend_scheme\":\"first\"", "\"prepend_scheme\":\"never\""),
          {"tok.json: pre_tokenizer.prepend_scheme: is \"never\""});
  refused(with(first, "\"prepend_scheme\":\"first\"", "\"add_prefix_space\":false"),
          {"tok.json: pre_tokenizer.add_prefix_space: is false"});
  // The decoder: SentencePiece's Sequence (as shipped) or Metaspace, else refused.
  const std::string decoder = "\"decoder\":{\"type\":\"Sequence\"";
  refused(with(legacy, decoder, "\"decoder\":null,\"x\":{\"type\":\"Sequence\""),
          {"tok.json: decoder: is null; expected"});
  refused(with(legacy, "\"start\":1,\"stop\":0", "\"start\":2,\"stop\":0"),
          {"tok.json: decoder: is {\"type\":\"Sequence\""});
  refused(with(legacy, "{\"type\":\"ByteFallback\"},", ""), {"tok.json: decoder: is"});
  refused(with(first, decoder, "\"decoder\":{\"type\":\"ByteLevel\"},\"x\":{\"type\":\"Sequence\""),
          {"tok.json: decoder: is {\"type\":\"ByteLevel\"}"});
  refused(with(first, decoder,
               "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"▁\",\"prepend_scheme\":\"never\"},"
               "\"x\":{\"type\":\"Sequence\""),
          {"tok.json: decoder: is {\"type\":\"Metaspace\""});
  const Tokenizer metaspace_decoder = Tokenizer::from_hf_text(
      with(first, decoder, "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"▁\",\"prepend_scheme\":\"first\","
                           "\"split\":false},\"x\":{\"type\":\"Sequence\""), "tok.json");
  CHECK(metaspace_decoder.encode("at the") == spm("mistral", "first").encode("at the"));
  refused(with(legacy, "\"byte_fallback\":true", "\"byte_fallback\":false"), {"tok.json: model.byte_fallback"});
  refused(with(legacy, "\"byte_fallback\":true", "\"byte_fallback\":true,\"ignore_merges\":true"),
          {"tok.json: model.ignore_merges"});
  refused(with(legacy, "\"dropout\":null", "\"dropout\":0.1"), {"tok.json: model.dropout: is 0.1"});
  refused(with(legacy, "\"unk_token\":\"<unk>\"", "\"unk_token\":\"<nope>\""),
          {"tok.json: model.unk_token: \"<nope>\" is not in the vocabulary"});
  refused(with(legacy, "\"unk_token\":\"<unk>\"", "\"unk_token\":7"), {"tok.json: model.unk_token: is 7"});
  refused(with(legacy, "\"<0x41>\"", "\"<0x4l>\""), {"tok.json: model.vocab: no <0x41> token; byte_fallback"});
  refused(with(legacy, "\"▁\":28705", "\"_\":28705"), {"tok.json: model.vocab: no \"▁\" token"});
  refused(with(legacy, "\"<0x41>\":68", "\"<0x41>\":1.5"), {"tok.json: model.vocab: token \"<0x41>\" has id 1.5"});
  refused(with(legacy, "\"<0x41>\":68", "\"<0x41>\":-1"), {"tok.json: model.vocab: token \"<0x41>\" has id -1"});
  refused(with(legacy, "\"<0x41>\":68", "\"<0x41>\":69"), {"tok.json: model.vocab: id 69 is given to two tokens"});
  refused(with(legacy, "\"▁ t\"", "\"▁ qqq\""), {"tok.json: model.merges: entry 0 (\"▁ qqq\") uses a token not in"});
  refused(with(legacy, "\"▁ t\"", "\"▁t\""), {"tok.json: model.merges: entry \"▁t\" is neither"});
  // A token with "▁" after other text would join across the cuts spm_pieces
  // makes: refused, unless Metaspace splits there too.
  auto inner_mark = [&](const std::string& json) {
    return with(with(json, "\"vocab\":{", "\"vocab\":{\"t▁\":32000,"), "\"merges\":[", "\"merges\":[\"t ▁\",");
  };
  refused(inner_mark(legacy), {"tok.json: model.merges: entry 0 builds \"t▁\", a \"▁\" after other text"});
  refused(inner_mark(first), {"tok.json: model.merges: entry 0 builds \"t▁\""});
  // Each piece starts at its "▁": "t▁" never forms.
  const Tokenizer split = Tokenizer::from_hf_text(inner_mark(spm_json("mistral", "always_split")), "tok.json");
  CHECK(split.encode("at the  tea ") == spm("mistral", "always_split").encode("at the  tea "));
}
