// Byte-level BPE (see tokenizer.h): vocabulary loading, merges, encode, decode;
// tokenizer.json in tokenizer_hf.cpp.
#include "engine/data/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "engine/data/json_text.h"
#include "engine/data/pretokenize.h"
#include "engine/data/normalize_nfc.h"
#include "engine/data/pretokenize_llama3.h"
#include "engine/data/tokenizer_spm.h"
#include "kernels/error.h"

namespace trainer::engine::data {
namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError(fmt::format("{}: cannot read {} ({})", path, what, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

const uint32_t* byte_to_unicode_table() {
  // Printable Latin-1 bytes map to themselves; the other 68 to U+0100.. in byte order.
  static const auto table = [] {
    static uint32_t t[256];
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : 256 + n++;
    }
    return t;
  }();
  return table;
}

// ---- WordCache ----

WordCache::WordCache(size_t max_bytes) : max_bytes_(max_bytes), slots_(size_t(1) << 16) {}

uint64_t WordCache::hash(std::string_view word) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : word) h = (h ^ c) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

const int32_t* WordCache::find(std::string_view word, uint64_t hash, uint32_t* n) const {
  const size_t mask = slots_.size() - 1;
  const uint32_t tag = static_cast<uint32_t>(hash >> 32);
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.key_len == 0) return nullptr;
    if (s.hash == tag && s.key_len == word.size() &&
        std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
      *n = s.num_ids;
      return ids_.data() + s.ids_off;
    }
  }
}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  ids_.clear();
  num_used_ = 0;
}

void WordCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, uint32_t n) {
  if (word.size() < 2 || word.size() > 0xFFFF || n > 0xFFFF) return;  // not worth caching
  if (keys_.size() + word.size() + 4 * (ids_.size() + n) > max_bytes_) clear();
  if (2 * (num_used_ + 1) > slots_.size()) {
    if (slots_.size() < (size_t(1) << 20)) {
      // Rehash needs the full hash: recompute it from the stored key.
      std::vector<Slot> old(slots_.size() * 2);
      old.swap(slots_);
      const size_t mask = slots_.size() - 1;
      for (const Slot& s : old) {
        if (s.key_len == 0) continue;
        size_t i = WordCache::hash(std::string_view(keys_.data() + s.key_off, s.key_len)) & mask;
        while (slots_[i].key_len != 0) i = (i + 1) & mask;
        slots_[i] = s;
      }
    } else {
      clear();
    }
  }
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i].key_len != 0) i = (i + 1) & mask;
  slots_[i] = Slot{static_cast<uint32_t>(hash >> 32), static_cast<uint32_t>(keys_.size()),
                   static_cast<uint32_t>(ids_.size()), static_cast<uint16_t>(word.size()),
                   static_cast<uint16_t>(n)};
  keys_.append(word);
  ids_.insert(ids_.end(), ids, ids + n);
  ++num_used_;
}

// ---- Tokenizer: loading ----

void Tokenizer::PairTable::build(const std::vector<std::pair<uint64_t, Merge>>& items) {
  size_t cap = 16;
  shift = 60;
  while (cap < 2 * items.size()) {
    cap *= 2;
    --shift;
  }
  slots.assign(cap, Slot{kEmpty, Merge{0, 0}});
  mask = cap - 1;
  for (const auto& [key, merge] : items) {
    uint64_t i = home(key);
    while (slots[i].key != kEmpty && slots[i].key != key) i = (i + 1) & mask;
    if (slots[i].key == key) continue;  // a repeated merge keeps its first (lowest) rank
    slots[i] = Slot{key, merge};
  }
}

Tokenizer Tokenizer::load(const std::string& vocab_path, const std::string& merges_path) {
  std::string vocab = read_file(vocab_path, "vocabulary");
  std::string merges = read_file(merges_path, "merges");
  return from_text(vocab, merges, vocab_path, merges_path);
}

Tokenizer Tokenizer::from_text(std::string_view vocab_json, std::string_view merges,
                               const std::string& vocab_name, const std::string& merges_name) {
  Tokenizer t;
  auto items = parse_string_int_object(vocab_json, vocab_name);
  TRAINER_INPUT_CHECK(!items.empty(), "{}: empty vocabulary (expected a JSON object token -> id)",
                      vocab_name);
  int64_t max_id = -1;
  for (const auto& [tok, id] : items) {
    TRAINER_INPUT_CHECK(id >= 0 && id < (int64_t(1) << 24),
                        "{}: token \"{}\" has id {}, expected 0 <= id < 2^24", vocab_name, tok, id);
    max_id = std::max(max_id, id);
  }
  // Vocabulary strings are written in GPT-2's byte alphabet; map them back to bytes.
  uint32_t unicode_to_byte[512];
  std::fill(std::begin(unicode_to_byte), std::end(unicode_to_byte), 0xFFFFFFFFu);
  for (uint32_t b = 0; b < 256; ++b) unicode_to_byte[byte_to_unicode_table()[b]] = b;

  t.token_bytes_.assign(max_id + 1, std::string());
  std::vector<bool> seen(max_id + 1, false);
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(items.size() * 2);
  std::fill(std::begin(t.byte_id_), std::end(t.byte_id_), -1);
  for (const auto& [tok, id] : items) {
    TRAINER_INPUT_CHECK(!seen[id], "{}: id {} is given to two tokens (second: \"{}\")", vocab_name, id,
                        tok);
    seen[id] = true;
    std::string bytes;
    bool byte_level = true;
    for (size_t p = 0; p < tok.size();) {
      Utf8Char c = decode_utf8(tok, p);
      if (c.cp >= 512 || unicode_to_byte[c.cp] == 0xFFFFFFFFu) { byte_level = false; break; }
      bytes += static_cast<char>(unicode_to_byte[c.cp]);
      p += c.len;
    }
    // A token outside the byte alphabet (an added special token) decodes to its own text.
    t.token_bytes_[id] = byte_level ? bytes : tok;
    if (byte_level && bytes.size() == 1) t.byte_id_[static_cast<unsigned char>(bytes[0])] = id;
    id_of.emplace(tok, static_cast<int32_t>(id));
    if (tok == "<|endoftext|>") t.eot_id_ = static_cast<int>(id);
  }
  for (int b = 0; b < 256; ++b)
    TRAINER_INPUT_CHECK(t.byte_id_[b] >= 0,
                        "{}: no token for byte 0x{:02X}; a byte-level BPE vocabulary has all 256 bytes",
                        vocab_name, b);

  std::vector<std::pair<uint64_t, Merge>> pairs;
  size_t pos = 0;
  int line_no = 0;
  int rank = 0;
  while (pos < merges.size()) {
    size_t eol = merges.find('\n', pos);
    if (eol == std::string_view::npos) eol = merges.size();
    std::string_view line = merges.substr(pos, eol - pos);
    size_t line_offset = pos;
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    size_t sp = line.find(' ');
    bool ok = sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
              line.find(' ', sp + 1) == std::string_view::npos;
    TRAINER_INPUT_CHECK(ok, "{}: line {} (byte offset {}): expected two tokens separated by one space, found \"{}{}\"",
                        merges_name, line_no, line_offset, line.substr(0, 60), line.size() > 60 ? "..." : "");
    std::string a(line.substr(0, sp)), b(line.substr(sp + 1));
    auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    TRAINER_INPUT_CHECK(ia != id_of.end() && ib != id_of.end() && iab != id_of.end(),
                        "{}: line {} (byte offset {}): merge \"{}\" uses a token not in the vocabulary {}",
                        merges_name, line_no, line_offset, line.substr(0, 120), vocab_name);
    uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    pairs.push_back({key, Merge{rank++, iab->second}});
  }
  // An empty file is a wrong path or a failed download, not a tokenizer: it
  // would encode every byte alone and train happily on that.
  TRAINER_INPUT_CHECK(rank > 0, "{}: lists no merges (expected one \"a b\" pair per line)", merges_name);
  t.num_merges_ = rank;
  t.pairs_.build(pairs);
  return t;
}

// ---- Tokenizer: encoding ----

void Tokenizer::encode_piece_reference(std::string_view piece, std::vector<int32_t>& out) const {
  if (pre_ == PreTokenizer::sentencepiece) return encode_spm_piece(piece, out, true);
  std::vector<int32_t> word;
  for (unsigned char c : piece) word.push_back(byte_id_[c]);
  while (word.size() > 1) {
    const Merge* best = nullptr;
    int32_t first = 0, second = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const Merge* m = pairs_.find(word[i], word[i + 1]);
      if (m && (!best || m->rank < best->rank)) { best = m; first = word[i]; second = word[i + 1]; }
    }
    if (!best) break;
    std::vector<int32_t> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(best->id);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word.swap(merged);
  }
  out.insert(out.end(), word.begin(), word.end());
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (pre_ == PreTokenizer::sentencepiece) return encode_spm_piece(piece, out, false);
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (n > kShortPiece) {
    encode_long_piece(piece, out);
    return;
  }
  // GPT-2's loop on a stack array. pair[i] is the merge of (word[i], word[i+1]);
  // a pass only looks up the pairs next to the tokens it merged.
  int32_t word[kShortPiece];
  const Merge* pair[kShortPiece];
  size_t len = n;
  for (size_t i = 0; i < n; ++i) word[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  for (size_t i = 0; i + 1 < len; ++i) pair[i] = pairs_.find(word[i], word[i + 1]);
  while (len > 1) {
    const Merge* best = nullptr;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < len; ++i)
      if (pair[i] && (!best || pair[i]->rank < best->rank)) { best = pair[i]; best_i = i; }
    if (!best) break;
    const int32_t first = word[best_i], second = word[best_i + 1], merged = best->id;
    size_t w = 0;
    bool last_merged = false;
    for (size_t i = 0; i < len;) {
      const bool merge = i + 1 < len && word[i] == first && word[i + 1] == second;
      const int32_t t = merge ? merged : word[i];
      if (w > 0) {
        // Both neighbours unchanged: the old pair (i-1, i) still holds; w <= i,
        // so pair[i-1] has not been overwritten yet.
        pair[w - 1] = (merge || last_merged) ? pairs_.find(word[w - 1], t) : pair[i - 1];
      }
      word[w++] = t;
      i += merge ? 2 : 1;
      last_merged = merge;
    }
    len = w;
  }
  out.insert(out.end(), word, word + len);
}

void Tokenizer::encode_long_piece(std::string_view piece, std::vector<int32_t>& out) const {
  // Same result as GPT-2's loop in O(n log n): a heap of (rank, position). A pass
  // of GPT-2 merges every occurrence, present when the pass starts, of the
  // lowest-ranked pair, left to right; pairs that merging creates wait in
  // `pending` until that pass is over, exactly as GPT-2 only sees them next pass.
  struct Entry {
    int32_t rank;
    int32_t pos;
    int32_t left, right;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> tok(n), next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) {
    tok[i] = byte_id_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  std::vector<Entry> pending;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const Merge* m = pairs_.find(tok[i], tok[i + 1])) heap.push({m->rank, i, tok[i], tok[i + 1]});
  int32_t pass_rank = -1;
  while (true) {
    if (heap.empty() || heap.top().rank != pass_rank) {
      for (const Entry& e : pending) heap.push(e);
      pending.clear();
      if (heap.empty()) break;
      pass_rank = heap.top().rank;
    }
    Entry e = heap.top();
    heap.pop();
    const int32_t r = next[e.pos];
    if (tok[e.pos] != e.left || r < 0 || tok[r] != e.right) continue;  // stale
    tok[e.pos] = pairs_.find(e.left, e.right)->id;
    tok[r] = -1;
    next[e.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = e.pos;
    if (prev[e.pos] >= 0) {
      int32_t p = prev[e.pos];
      if (const Merge* m = pairs_.find(tok[p], tok[e.pos])) pending.push_back({m->rank, p, tok[p], tok[e.pos]});
    }
    if (next[e.pos] >= 0) {
      int32_t q = next[e.pos];
      if (const Merge* m = pairs_.find(tok[e.pos], tok[q])) pending.push_back({m->rank, e.pos, tok[e.pos], tok[q]});
    }
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(tok[i]);
}

void Tokenizer::encode_cached(std::string_view piece, std::vector<int32_t>& out, WordCache* cache) const {
  auto word = [&] {
    if (ignore_merges_ && piece.size() > 1)
      if (auto it = whole_.find(std::string(piece)); it != whole_.end()) {
        out.push_back(it->second);
        return;
      }
    encode_piece(piece, out);
  };
  if (piece.size() == 1 || cache == nullptr) {
    word();
    return;
  }
  uint64_t h = WordCache::hash(piece);
  uint32_t num = 0;
  if (const int32_t* ids = cache->find(piece, h, &num)) {
    out.insert(out.end(), ids, ids + num);
    return;
  }
  size_t before = out.size();
  word();
  cache->insert(piece, h, out.data() + before, static_cast<uint32_t>(out.size() - before));
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out, WordCache* cache,
                       bool document_start) const {
  std::string normalized;
  if (nfc_ && nfc_into(text, normalized)) return encode_normalized(normalized, out, cache, document_start);
  encode_normalized(text, out, cache, document_start);
}

void Tokenizer::encode_normalized(std::string_view text, std::vector<int32_t>& out, WordCache* cache,
                                  bool document_start) const {
  auto emit = [&](size_t begin, size_t end) { encode_cached(text.substr(begin, end - begin), out, cache); };
  switch (pre_) {
    case PreTokenizer::gpt2:
      return pretokenize(text, emit);
    case PreTokenizer::llama3:
      return pretokenize_llama3(text, emit);
    case PreTokenizer::qwen2:
      return pretokenize_llama3(text, emit, 1);
    case PreTokenizer::sentencepiece: {
      // The "▁" before a document is a space before its first piece (the
      // normalizer turns both into the same symbol).
      bool prepend = document_start && !text.empty() && (spm_.prepend_always || spm_space_len(text, 0) == 0);
      return spm_pieces(text, spm_.split, [&](size_t begin, size_t end) {
        if (!prepend) return emit(begin, end);
        prepend = false;
        std::string first(1, ' ');
        first.append(text.substr(begin, end - begin));
        encode_cached(first, out, cache);
      });
    }
  }
}

size_t Tokenizer::safe_cut(std::string_view text) const {
  switch (pre_) {
    case PreTokenizer::llama3:
    case PreTokenizer::qwen2:  // a cut before ' ' or '\n' after ASCII is also one of NFC's
      return find_safe_cut_llama3(text);
    case PreTokenizer::sentencepiece:
      return find_safe_cut_spm(text);
    default:
      return find_safe_cut(text);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  WordCache cache(size_t(1) << 20);
  encode(text, out, &cache);
  return out;
}

std::string Tokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    TRAINER_INPUT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(),
                        "token id {} at position {} is outside the vocabulary (0..{})", ids[i], i,
                        vocab_size() - 1);
    out += token_bytes_[ids[i]];
  }
  return out;
}

}  // namespace trainer::engine::data
