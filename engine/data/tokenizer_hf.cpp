// Tokenizer::load_hf: a Hugging Face tokenizer.json of a byte-level BPE
// (GPT-2's, Llama 3's or Qwen2's), read into the same tables as vocab.json + merges.txt,
// or of a SentencePiece-style BPE (Llama 2's, Mistral's; tokenizer_spm.cpp).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/data/tokenizer.h"
#include "engine/json.h"
#include "kernels/error.h"

namespace trainer::engine::data {
namespace {

constexpr std::string_view kMark = "\xE2\x96\x81";  // "▁", SentencePiece's space

// The Split pattern of Llama 3's tokenizer.json (tiktoken's cl100k_base).
constexpr const char* kLlama3Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Qwen2's (Qwen1.5 to Qwen3): Llama 3's with single digits.
constexpr const char* kQwen2Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

[[noreturn]] void refuse(const std::string& file, const std::string& key, const std::string& what) {
  throw InputError(fmt::format("{}: {}: {}", file, key, what));
}

std::string shown(const Json* v) { return v ? v->dump() : "absent"; }

bool is_type(const Json* v, const char* type) {
  const Json* t = v && v->is_object() ? v->find("type") : nullptr;
  return t && t->is_string() && t->as_string() == type;
}

bool flag(const Json& obj, const char* key, bool fallback) {
  const Json* v = obj.find(key);
  return v && v->kind() == Json::Kind::boolean ? v->as_bool() : fallback;
}

bool is_null(const Json* v) { return !v || v->kind() == Json::Kind::null; }

bool is_string(const Json* v, std::string_view s) { return v && v->is_string() && v->as_string() == s; }

// ByteLevel as GPT-2 has it: no prefix space; use_regex as given.
bool byte_level(const Json* v, bool use_regex) {
  return is_type(v, "ByteLevel") && !flag(*v, "add_prefix_space", false) &&
         flag(*v, "use_regex", true) == use_regex;
}

PreTokenizer pre_tokenizer_of(const Json& j, const std::string& file) {
  const Json* p = j.find("pre_tokenizer");
  if (byte_level(p, true)) return PreTokenizer::gpt2;
  if (is_type(p, "Sequence")) {
    const Json* list = p->find("pretokenizers");
    if (list && list->is_array() && list->items().size() == 2) {
      const Json& split = list->items()[0];
      const Json* pattern = is_type(&split, "Split") ? split.find("pattern") : nullptr;
      const Json* regex = pattern && pattern->is_object() ? pattern->find("Regex") : nullptr;
      const Json* behavior = is_type(&split, "Split") ? split.find("behavior") : nullptr;
      const bool isolated = behavior && behavior->is_string() && behavior->as_string() == "Isolated" &&
                            !flag(split, "invert", false) && byte_level(&list->items()[1], false);
      if (isolated && is_string(regex, kLlama3Pattern)) return PreTokenizer::llama3;
      if (isolated && is_string(regex, kQwen2Pattern)) return PreTokenizer::qwen2;
    }
  }
  refuse(file, "pre_tokenizer",
         "neither GPT-2's ByteLevel regex nor Llama 3's or Qwen2's Split pattern + ByteLevel; this trainer would "
         "split text differently from the model's tokenizer");
}

// SentencePiece's legacy normalizer (Llama 2, Mistral 7B v0.1): Prepend("▁"),
// then Replace(" ", "▁").
bool prepend_replace(const Json* n) {
  const Json* list = is_type(n, "Sequence") ? n->find("normalizers") : nullptr;
  if (!list || !list->is_array() || list->items().size() != 2) return false;
  const Json& prepend = list->items()[0];
  const Json& replace = list->items()[1];
  const Json* pattern = is_type(&replace, "Replace") ? replace.find("pattern") : nullptr;
  return is_type(&prepend, "Prepend") && is_string(prepend.find("prepend"), kMark) && pattern &&
         pattern->is_object() && is_string(pattern->find("String"), " ") && is_string(replace.find("content"), kMark);
}

// The two ways a SentencePiece-style tokenizer.json turns spaces into "▁": the
// legacy normalizer without a pre-tokenizer, or a Metaspace pre-tokenizer
// without a normalizer (Mistral 7B v0.3, Llama 2 converted with legacy=False).
SpmForm spm_form_of(const Json& j, const std::string& file) {
  const Json* n = j.find("normalizer");
  const Json* p = j.find("pre_tokenizer");
  if (prepend_replace(n)) {
    if (!is_null(p))
      refuse(file, "pre_tokenizer", fmt::format("is {}; with the Prepend + Replace normalizer only none (null) is "
                                                "supported", p->dump().substr(0, 80)));
    return SpmForm{true, false};
  }
  if (!is_null(n))
    refuse(file, "normalizer", fmt::format("is {}; only none and SentencePiece's Prepend(\"\u2581\") + Replace(\" \", "
                                           "\"\u2581\") are supported", n->dump().substr(0, 80)));
  if (!is_type(p, "Metaspace"))
    refuse(file, "pre_tokenizer",
           fmt::format("is {}; expected GPT-2's ByteLevel regex, Llama 3's Split pattern + ByteLevel, SentencePiece's "
                       "Metaspace, or none with SentencePiece's Prepend + Replace normalizer", shown(p).substr(0, 80)));
  if (!is_string(p->find("replacement"), kMark))
    refuse(file, "pre_tokenizer.replacement", fmt::format("is {}, expected \"\u2581\"", shown(p->find("replacement"))));
  // "first" puts the "▁" before the text's first split only, which is all of
  // it here: specials in the text are text, nothing splits it before.
  const Json* scheme = p->find("prepend_scheme");
  if (scheme && !is_string(scheme, "first") && !is_string(scheme, "always"))
    refuse(file, "pre_tokenizer.prepend_scheme", fmt::format("is {}, expected \"first\" or \"always\"", scheme->dump()));
  // tokenizers before 0.19 wrote add_prefix_space (false: prepend_scheme "never").
  if (!flag(*p, "add_prefix_space", true))
    refuse(file, "pre_tokenizer.add_prefix_space", "is false (prepend_scheme \"never\"): not supported");
  return SpmForm{false, flag(*p, "split", true)};
}

// The decoders decode_document agrees with: SentencePiece's Sequence of
// Replace("▁", " "), ByteFallback, Fuse and Strip(" ", 1, 0) (what
// transformers' LlamaConverter writes, in both forms), or a Metaspace decoder
// that strips the first token's "▁" (which prints a byte token as its name
// where decode_document puts the bytes back together).
bool spm_decoder(const Json* d) {
  if (is_type(d, "Metaspace"))
    return is_string(d->find("replacement"), kMark) && !is_string(d->find("prepend_scheme"), "never") &&
           flag(*d, "add_prefix_space", true);
  const Json* list = is_type(d, "Sequence") ? d->find("decoders") : nullptr;
  if (!list || !list->is_array() || list->items().size() != 4) return false;
  const std::vector<Json>& s = list->items();
  const Json* pattern = is_type(&s[0], "Replace") ? s[0].find("pattern") : nullptr;
  auto number = [](const Json& o, const char* key, double v) {
    const Json* n = o.find(key);
    return n && n->is_number() && n->as_number() == v;
  };
  return pattern && pattern->is_object() && is_string(pattern->find("String"), kMark) &&
         is_string(s[0].find("content"), " ") && is_type(&s[1], "ByteFallback") && is_type(&s[2], "Fuse") &&
         is_type(&s[3], "Strip") && is_string(s[3].find("content"), " ") && number(s[3], "start", 1) &&
         number(s[3], "stop", 0);
}

// The added tokens (specials such as <s>, <|begin_of_text|>): content, id.
std::vector<std::pair<std::string, int64_t>> added_tokens(const Json& j, const std::string& file) {
  std::vector<std::pair<std::string, int64_t>> out;
  const Json* added = j.find("added_tokens");
  if (!added || !added->is_array()) return out;
  for (const Json& a : added->items()) {
    const Json* id = a.is_object() ? a.find("id") : nullptr;
    const Json* content = a.is_object() ? a.find("content") : nullptr;
    // An id must be a whole number an int32 holds (3e20 would throw out of as_int).
    const double v = id && id->is_number() ? id->as_number() : -1;
    if (!(v >= 0 && v < 2147483648.0 && std::floor(v) == v) || !content || !content->is_string())
      refuse(file, "added_tokens", fmt::format("entry {} needs an integer id in [0, 2^31) and a content "
                                               "string", a.dump().substr(0, 80)));
    out.emplace_back(content->as_string(), static_cast<int64_t>(v));
  }
  return out;
}

// Merges are "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs.
std::vector<std::pair<std::string, std::string>> merge_pairs(const Json& merges, const std::string& file) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Json& m : merges.items()) {
    const size_t sp = m.is_string() ? m.as_string().find(' ') : std::string::npos;
    if (sp != std::string::npos && m.as_string().find(' ', sp + 1) == std::string::npos) {
      out.emplace_back(m.as_string().substr(0, sp), m.as_string().substr(sp + 1));
    } else if (m.is_array() && m.items().size() == 2 && m.items()[0].is_string() && m.items()[1].is_string()) {
      out.emplace_back(m.items()[0].as_string(), m.items()[1].as_string());
    } else {
      refuse(file, "model.merges", fmt::format("entry {} is neither \"a b\" nor [\"a\", \"b\"]", m.dump().substr(0, 80)));
    }
  }
  return out;
}

// The SentencePiece-style BPE model's own keys (its form is spm_form_of's).
Tokenizer spm_from_hf(const Json& j, const Json& model, const Json& vocab, const Json& merges, const std::string& file) {
  const SpmForm form = spm_form_of(j, file);
  if (const Json* d = j.find("decoder"); !spm_decoder(d))
    refuse(file, "decoder", fmt::format("is {}; expected SentencePiece's Replace(\"\u2581\", \" \") + ByteFallback + "
                                        "Fuse + Strip(\" \", 1, 0), or Metaspace; this trainer would decode "
                                        "ids differently from the model's tokenizer", shown(d).substr(0, 80)));
  if (!flag(model, "byte_fallback", false))
    refuse(file, "model.byte_fallback", "is not true; without it a character outside the vocabulary becomes <unk>, "
                                        "which this trainer does not write");
  if (flag(model, "ignore_merges", false))
    refuse(file, "model.ignore_merges", "is true; Hugging Face applies it to whole words, which this trainer cuts");
  if (const Json* d = model.find("dropout"); !is_null(d))
    refuse(file, "model.dropout", fmt::format("is {}; BPE dropout tokenizes at random", d->dump()));
  const Json* unk = model.find("unk_token");
  if (!is_null(unk) && !unk->is_string()) refuse(file, "model.unk_token", fmt::format("is {}, expected a string", unk->dump()));
  std::vector<std::pair<std::string, int64_t>> tokens;
  for (const auto& [token, id] : vocab.members()) {
    // Ids are checked as numbers here; their range in from_spm.
    if (!id.is_number() || std::floor(id.as_number()) != id.as_number() || std::fabs(id.as_number()) > 1e15)
      refuse(file, "model.vocab", fmt::format("token \"{}\" has id {}, expected an integer", token, id.dump()));
    tokens.emplace_back(token, static_cast<int64_t>(id.as_number()));
  }
  return Tokenizer::from_spm(tokens, added_tokens(j, file), merge_pairs(merges, file), form,
                             is_null(unk) ? std::string() : unk->as_string(), file);
}

}  // namespace

Tokenizer Tokenizer::load_hf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot read tokenizer.json ({})", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return from_hf_text(ss.str(), path);
}

Tokenizer Tokenizer::from_hf_text(std::string_view text, const std::string& file) {
  const Json j = parse_json(text, file);
  if (!j.is_object()) refuse(file, "(root)", "expected a JSON object (a Hugging Face tokenizer.json)");
  const Json* model = j.find("model");
  if (!is_type(model, "BPE"))
    refuse(file, "model.type", fmt::format("is {}, expected \"BPE\"", shown(model ? model->find("type") : nullptr)));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = model->find(key);
    if (v && v->kind() != Json::Kind::null && !(v->is_string() && v->as_string().empty()))
      refuse(file, std::string("model.") + key, fmt::format("is {}; the BPE this trainer reads has none", v->dump()));
  }
  const Json* vocab = model->find("vocab");
  const Json* merges = model->find("merges");
  if (!vocab || !vocab->is_object()) refuse(file, "model.vocab", "expected an object token -> id");
  if (!merges || !merges->is_array()) refuse(file, "model.merges", "expected an array of merges");
  if (const Json* p = j.find("pre_tokenizer"); is_null(p) || is_type(p, "Metaspace"))
    return spm_from_hf(j, *model, *vocab, *merges, file);

  if (flag(*model, "byte_fallback", false)) refuse(file, "model.byte_fallback", "is true; a byte-level BPE has none");
  const Json* normalizer = j.find("normalizer");
  if (!is_null(normalizer) && !is_type(normalizer, "NFC"))
    refuse(file, "normalizer", fmt::format("is {}; only none and NFC (Qwen2's) are supported", normalizer->dump().substr(0, 80)));
  const PreTokenizer pre = pre_tokenizer_of(j, file);
  // The added tokens (specials such as <|begin_of_text|>) join the vocabulary.
  Json all = *vocab;
  for (const auto& [content, id] : added_tokens(j, file))
    if (!vocab->find(content)) all.set(content, Json(id));
  std::string lines;
  for (const auto& [a, b] : merge_pairs(*merges, file)) lines += a + " " + b + "\n";
  Tokenizer t = from_text(all.dump(), lines, file + " model.vocab", file + " model.merges");
  t.pre_ = pre;
  t.nfc_ = !is_null(normalizer);
  t.ignore_merges_ = flag(*model, "ignore_merges", false);
  if (t.ignore_merges_)
    for (const auto& [token, id] : vocab->members())
      t.whole_.emplace(t.token_bytes_[static_cast<size_t>(id.as_int())], static_cast<int32_t>(id.as_int()));
  if (const Json* eos = all.find("<|end_of_text|>")) t.eot_id_ = static_cast<int>(eos->as_int());
  if (const Json* bos = all.find("<|begin_of_text|>")) t.bos_id_ = static_cast<int>(bos->as_int());
  return t;
}

}  // namespace trainer::engine::data
