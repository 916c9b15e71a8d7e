// Tokenizer::load_hf: a Hugging Face tokenizer.json of a byte-level BPE
// (GPT-2's or Llama 3's), read into the same tables as vocab.json + merges.txt.
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

// The Split pattern of Llama 3's tokenizer.json (tiktoken's cl100k_base).
constexpr const char* kLlama3Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

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
      if (regex && regex->is_string() && regex->as_string() == kLlama3Pattern && behavior &&
          behavior->is_string() && behavior->as_string() == "Isolated" && !flag(split, "invert", false) &&
          byte_level(&list->items()[1], false))
        return PreTokenizer::llama3;
    }
  }
  refuse(file, "pre_tokenizer",
         "neither GPT-2's ByteLevel regex nor Llama 3's Split pattern + ByteLevel; this trainer would "
         "split text differently from the model's tokenizer");
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
      refuse(file, std::string("model.") + key, fmt::format("is {}; a byte-level BPE has none", v->dump()));
  }
  if (flag(*model, "byte_fallback", false)) refuse(file, "model.byte_fallback", "is true; a byte-level BPE has none");
  if (const Json* n = j.find("normalizer"); n && n->kind() != Json::Kind::null)
    refuse(file, "normalizer", fmt::format("is {}; only tokenizers without one are supported", n->dump().substr(0, 80)));
  const PreTokenizer pre = pre_tokenizer_of(j, file);

  const Json* vocab = model->find("vocab");
  const Json* merges = model->find("merges");
  if (!vocab || !vocab->is_object()) refuse(file, "model.vocab", "expected an object token -> id");
  if (!merges || !merges->is_array()) refuse(file, "model.merges", "expected an array of merges");
  // The added tokens (specials such as <|begin_of_text|>) join the vocabulary.
  Json all = *vocab;
  if (const Json* added = j.find("added_tokens"); added && added->is_array())
    for (const Json& a : added->items()) {
      const Json* id = a.is_object() ? a.find("id") : nullptr;
      const Json* content = a.is_object() ? a.find("content") : nullptr;
      // An id must be a whole number an int32 holds (3e20 would throw out of as_int).
      const double v = id && id->is_number() ? id->as_number() : -1;
      if (!(v >= 0 && v < 2147483648.0 && std::floor(v) == v) || !content || !content->is_string())
        refuse(file, "added_tokens", fmt::format("entry {} needs an integer id in [0, 2^31) and a content "
                                                 "string", a.dump().substr(0, 80)));
      if (!vocab->find(content->as_string())) all.set(content->as_string(), Json(static_cast<int64_t>(v)));
    }
  // Merges are "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs.
  std::string lines;
  for (const Json& m : merges->items()) {
    if (m.is_string()) {
      lines += m.as_string();
    } else if (m.is_array() && m.items().size() == 2 && m.items()[0].is_string() && m.items()[1].is_string()) {
      lines += m.items()[0].as_string() + " " + m.items()[1].as_string();
    } else {
      refuse(file, "model.merges", fmt::format("entry {} is neither \"a b\" nor [\"a\", \"b\"]", m.dump().substr(0, 80)));
    }
    lines += '\n';
  }
  Tokenizer t = from_text(all.dump(), lines, file + " model.vocab", file + " model.merges");
  t.pre_ = pre;
  t.ignore_merges_ = flag(*model, "ignore_merges", false);
  if (t.ignore_merges_)
    for (const auto& [token, id] : vocab->members())
      t.whole_.emplace(t.token_bytes_[static_cast<size_t>(id.as_int())], static_cast<int32_t>(id.as_int()));
  if (const Json* eos = all.find("<|end_of_text|>")) t.eot_id_ = static_cast<int>(eos->as_int());
  if (const Json* bos = all.find("<|begin_of_text|>")) t.bos_id_ = static_cast<int>(bos->as_int());
  return t;
}

}  // namespace trainer::engine::data
