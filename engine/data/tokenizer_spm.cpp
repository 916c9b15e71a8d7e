// SentencePiece-style BPE as Hugging Face's tokenizers runs it (Llama 2's,
// Mistral's tokenizer.json): tables from the vocabulary and merges, the
// initial symbols with byte_fallback, and BPE's merge order. The tokenizer.json
// forms are read in tokenizer_hf.cpp, the pieces cut in tokenizer_spm.h.
#include "engine/data/tokenizer_spm.h"

#include <algorithm>
#include <queue>

#include "engine/data/pretokenize.h"
#include "engine/data/tokenizer.h"
#include "kernels/error.h"

namespace trainer::engine::data {
namespace {

constexpr std::string_view kMark = "\xE2\x96\x81";  // "▁"

// "<0x0A>" -> 10: the tokens byte_fallback writes (Rust's "<{:#04X}>"), else -1.
int byte_token_value(std::string_view tok) {
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  if (tok.size() != 6 || tok.substr(0, 3) != "<0x" || tok[5] != '>') return -1;
  const int hi = hex(tok[3]), lo = hex(tok[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// A token's text as the decoder writes it: each "▁" a space.
std::string with_spaces(std::string_view tok) {
  std::string out;
  for (size_t p = 0; p < tok.size();) {
    if (tok.compare(p, kMark.size(), kMark) == 0) {
      out += ' ';
      p += kMark.size();
    } else {
      out += tok[p++];
    }
  }
  return out;
}

// Whether a "▁" follows other text in tok: such a token would join a piece to
// the one before it, across the place spm_pieces cuts.
bool mark_after_text(std::string_view tok) {
  for (size_t p = tok.find(kMark, 1); p != std::string_view::npos; p = tok.find(kMark, p + kMark.size()))
    if (p < kMark.size() || tok.compare(p - kMark.size(), kMark.size(), kMark) != 0) return true;
  return false;
}

}  // namespace

Tokenizer Tokenizer::from_spm(const std::vector<std::pair<std::string, int64_t>>& vocab,
                              const std::vector<std::pair<std::string, int64_t>>& added,
                              const std::vector<std::pair<std::string, std::string>>& merges, SpmForm form,
                              const std::string& unk_token, const std::string& file) {
  Tokenizer t;
  t.pre_ = PreTokenizer::sentencepiece;
  t.spm_ = form;
  int64_t max_id = -1;
  for (const auto* list : {&vocab, &added})
    for (const auto& [tok, id] : *list) {
      TRAINER_INPUT_CHECK(id >= 0 && id < (int64_t(1) << 24), "{}: model.vocab: token \"{}\" has id {}, expected "
                          "0 <= id < 2^24", file, tok, id);
      max_id = std::max(max_id, id);
    }
  TRAINER_INPUT_CHECK(!vocab.empty(), "{}: model.vocab: empty (expected an object token -> id)", file);
  t.token_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  std::vector<bool> seen(static_cast<size_t>(max_id + 1), false);
  std::unordered_map<std::string, int32_t> id_of;  // the model's vocabulary: what BPE can build
  id_of.reserve(vocab.size() * 2);
  std::fill(std::begin(t.byte_id_), std::end(t.byte_id_), -1);
  std::fill(std::begin(t.spm_ascii_), std::end(t.spm_ascii_), -1);
  auto name_id = [&](const std::string& tok, int64_t id, std::string text) {
    TRAINER_INPUT_CHECK(!seen[id], "{}: model.vocab: id {} is given to two tokens (second: \"{}\")", file, id, tok);
    seen[id] = true;
    t.token_bytes_[id] = std::move(text);
  };
  for (const auto& [tok, id] : vocab) {
    const int byte = byte_token_value(tok);
    name_id(tok, id, byte >= 0 ? std::string(1, static_cast<char>(byte)) : with_spaces(tok));
    id_of.emplace(tok, static_cast<int32_t>(id));
    if (byte >= 0) t.byte_id_[byte] = static_cast<int32_t>(id);
    if (tok.empty()) continue;
    const Utf8Char c = decode_utf8(tok, 0);
    if (c.len != tok.size() || c.cp == 0xFFFFFFFFu) continue;
    if (c.cp < 128) t.spm_ascii_[c.cp] = static_cast<int32_t>(id);
    else t.spm_char_.emplace(c.cp, static_cast<int32_t>(id));
  }
  for (const auto& [tok, id] : added)
    if (!id_of.count(tok)) name_id(tok, id, tok);
  for (int b = 0; b < 256; ++b) {
    TRAINER_INPUT_CHECK(t.byte_id_[b] >= 0, "{}: model.vocab: no <0x{:02X}> token; byte_fallback needs all 256 byte "
                        "tokens (a character outside the vocabulary would become <unk>)", file, b);
    if (b < 128 && t.spm_ascii_[b] < 0) t.spm_ascii_[b] = t.byte_id_[b];
  }
  const auto space = id_of.find(std::string(kMark));
  TRAINER_INPUT_CHECK(space != id_of.end(), "{}: model.vocab: no \"\u2581\" token (the space of a SentencePiece "
                      "vocabulary)", file);
  t.spm_ascii_[' '] = space->second;

  std::vector<std::pair<uint64_t, Merge>> pairs;
  for (const auto& [a, b] : merges) {
    const auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    TRAINER_INPUT_CHECK(ia != id_of.end() && ib != id_of.end() && iab != id_of.end(), "{}: model.merges: entry {} "
                        "(\"{} {}\") uses a token not in the vocabulary", file, pairs.size(), a, b);
    TRAINER_INPUT_CHECK(form.split || !mark_after_text(iab->first), "{}: model.merges: entry {} builds \"{}\", a "
                        "\"\u2581\" after other text: this trainer cuts text into words before such a \"\u2581\" "
                        "(only a Metaspace pre-tokenizer with split: true does so too)", file, pairs.size(), iab->first);
    const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    pairs.push_back({key, Merge{static_cast<int32_t>(pairs.size()), iab->second}});
  }
  TRAINER_INPUT_CHECK(!pairs.empty(), "{}: model.merges: lists no merges", file);
  t.num_merges_ = static_cast<int>(pairs.size());
  t.pairs_.build(pairs);

  if (!unk_token.empty()) {
    const auto unk = id_of.find(unk_token);
    TRAINER_INPUT_CHECK(unk != id_of.end(), "{}: model.unk_token: \"{}\" is not in the vocabulary", file, unk_token);
    t.unk_id_ = unk->second;
  }
  for (const auto* list : {&vocab, &added})
    for (const auto& [tok, id] : *list) {
      if (tok == "<s>") t.bos_id_ = static_cast<int>(id);
      if (tok == "</s>") t.eot_id_ = static_cast<int>(id);
    }
  return t;
}

size_t Tokenizer::spm_symbols(std::string_view piece, int32_t* out) const {
  size_t n = 0;
  for (size_t i = 0; i < piece.size();) {
    const unsigned char b = static_cast<unsigned char>(piece[i]);
    if (b < 0x80) {
      out[n++] = spm_ascii_[b];
      ++i;
      continue;
    }
    const Utf8Char c = decode_utf8(piece, i);
    const auto it = c.cp == 0xFFFFFFFFu ? spm_char_.end() : spm_char_.find(c.cp);
    if (it != spm_char_.end()) {
      out[n++] = it->second;
    } else {
      // byte_fallback; an invalid UTF-8 byte (which Hugging Face never sees) likewise.
      for (uint32_t k = 0; k < c.len; ++k) out[n++] = byte_id_[static_cast<unsigned char>(piece[i + k])];
    }
    i += c.len;
  }
  return n;
}

void Tokenizer::encode_spm_piece(std::string_view piece, std::vector<int32_t>& out, bool reference) const {
  if (!reference && piece.size() <= kShortPiece) {
    int32_t word[kShortPiece];
    const Merge* pair[kShortPiece];
    const size_t len = merge_lowest_first(word, pair, spm_symbols(piece, word));
    out.insert(out.end(), word, word + len);
    return;
  }
  std::vector<int32_t> word(piece.size());
  word.resize(spm_symbols(piece, word.data()));
  if (reference) {
    std::vector<const Merge*> pair(word.size());
    word.resize(merge_lowest_first(word.data(), pair.data(), word.size()));
  } else {
    merge_by_heap(word);
  }
  out.insert(out.end(), word.begin(), word.end());
}

size_t Tokenizer::merge_lowest_first(int32_t* word, const Merge** pair, size_t len) const {
  for (size_t i = 0; i + 1 < len; ++i) pair[i] = pairs_.find(word[i], word[i + 1]);
  while (len > 1) {
    size_t best = len;
    for (size_t i = 0; i + 1 < len; ++i)
      if (pair[i] && (best == len || pair[i]->rank < pair[best]->rank)) best = i;
    if (best == len) break;
    word[best] = pair[best]->id;
    std::copy(word + best + 2, word + len, word + best + 1);
    if (best + 2 <= len - 1) std::copy(pair + best + 2, pair + len - 1, pair + best + 1);
    --len;
    if (best > 0) pair[best - 1] = pairs_.find(word[best - 1], word[best]);
    if (best + 1 < len) pair[best] = pairs_.find(word[best], word[best + 1]);
  }
  return len;
}

void Tokenizer::merge_by_heap(std::vector<int32_t>& word) const {
  // Hugging Face's Word::merge_all: entries (rank, position of the left
  // symbol, merged id); a popped entry whose pair has changed since is stale.
  struct Entry {
    int32_t rank, pos, id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(word.size());
  if (n < 2) return;
  std::vector<int32_t> next(n), prev(n);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
    if (i + 1 < n)
      if (const Merge* m = pairs_.find(word[i], word[i + 1])) heap.push({m->rank, i, m->id});
  }
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const int32_t r = next[e.pos];
    if (word[e.pos] < 0 || r < 0) continue;
    const Merge* m = pairs_.find(word[e.pos], word[r]);
    if (!m || m->id != e.id) continue;
    word[e.pos] = e.id;
    word[r] = -1;
    next[e.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = e.pos;
    if (const int32_t p = prev[e.pos]; p >= 0)
      if (const Merge* left = pairs_.find(word[p], word[e.pos])) heap.push({left->rank, p, left->id});
    if (const int32_t q = next[e.pos]; q >= 0)
      if (const Merge* right = pairs_.find(word[e.pos], word[q])) heap.push({right->rank, e.pos, right->id});
  }
  word.erase(std::remove(word.begin(), word.end(), -1), word.end());
}

std::string Tokenizer::decode_document(const std::vector<int32_t>& ids) const {
  std::string text = decode(ids);
  if (pre_ == PreTokenizer::sentencepiece && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

}  // namespace trainer::engine::data
