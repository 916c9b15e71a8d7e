// BPE tokenizers: byte-level BPE from GPT-2's encoder.json + vocab.bpe (or HF
// vocab.json + merges.txt) or a Hugging Face tokenizer.json (GPT-2's or Llama
// 3's), and SentencePiece-style BPE from a tokenizer.json (Llama 2's,
// Mistral's: tokenizer_spm.cpp). Encodes text to ids exactly as their
// reference tokenizers do (pre-tokenizer, then merges applied by rank within
// each piece) and decodes ids back to bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace trainer::engine::data {

// Cache of piece -> ids for one thread; bounded (cleared when full) so memory
// stays flat on any corpus. The ids never depend on the cache.
class WordCache {
 public:
  explicit WordCache(size_t max_bytes = size_t(64) << 20);
  // The ids of `word`, or nullptr (n untouched) when it is not cached.
  const int32_t* find(std::string_view word, uint64_t hash, uint32_t* n) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, uint32_t n);
  static uint64_t hash(std::string_view word);

 private:
  // 16 bytes; key_len 0 marks an empty slot (cached pieces have >= 2 bytes).
  struct Slot {
    uint32_t hash = 0;
    uint32_t key_off = 0;
    uint32_t ids_off = 0;
    uint16_t key_len = 0;
    uint16_t num_ids = 0;
  };
  void clear();
  size_t max_bytes_;
  std::vector<Slot> slots_;
  size_t num_used_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
};

// The pre-tokenizer a vocabulary was trained with: GPT-2's regex, Llama 3's
// (tiktoken cl100k's; pretokenize_llama3.h), Qwen2's (Llama 3's with single
// digits), or SentencePiece's: spaces become "▁" and pieces start at a "▁"
// (tokenizer_spm.h).
enum class PreTokenizer : uint8_t { gpt2, llama3, qwen2, sentencepiece };

// How a SentencePiece-style tokenizer.json puts the "▁" before a document.
struct SpmForm {
  // The legacy Prepend("▁") normalizer: before any non-empty text. Metaspace
  // (prepend_scheme "first" or "always"): only before text that does not
  // already start with a space or "▁".
  bool prepend_always = true;
  // Metaspace's split: every "▁" starts a piece. Without it (and in the
  // legacy form) Hugging Face merges the whole text as one word.
  bool split = false;
};

class Tokenizer {
 public:
  // vocab_path: a JSON object token -> id (GPT-2 encoder.json or HF vocab.json);
  // merges_path: one merge "a b" per line, ranked by line order (vocab.bpe or
  // merges.txt; a first line starting with "#version" is skipped).
  static Tokenizer load(const std::string& vocab_path, const std::string& merges_path);
  // Same from the files' contents (names are only for messages).
  static Tokenizer from_text(std::string_view vocab_json, std::string_view merges,
                            const std::string& vocab_name, const std::string& merges_name);
  // A Hugging Face tokenizer.json of a byte-level BPE: GPT-2's (ByteLevel
  // pre-tokenizer with its regex), Llama 3's (Split on its pattern, then
  // ByteLevel; ignore_merges) or Qwen2's (Split on its pattern, ByteLevel, an
  // NFC normalizer); or a SentencePiece-style BPE (byte_fallback,
  // the legacy Prepend/Replace normalizer or a Metaspace pre-tokenizer: Llama
  // 2's, Mistral's). Its added tokens join the vocabulary. Any other model,
  // normalizer or pre-tokenizer (or, for SentencePiece, decoder) is an
  // InputError naming the file and the key: it would tokenize (or decode)
  // differently from the model's own.
  static Tokenizer load_hf(const std::string& tokenizer_json_path);
  static Tokenizer from_hf_text(std::string_view tokenizer_json, const std::string& name);
  // A SentencePiece-style BPE from the parts of its tokenizer.json
  // (tokenizer_spm.cpp): the model's vocabulary and merges, the added tokens
  // (they only name ids: Hugging Face's BPE never builds them), its form and
  // unk_token ("" for none). Bad parts are an InputError naming `file` and the key.
  static Tokenizer from_spm(const std::vector<std::pair<std::string, int64_t>>& vocab,
                            const std::vector<std::pair<std::string, int64_t>>& added,
                            const std::vector<std::pair<std::string, std::string>>& merges, SpmForm form,
                            const std::string& unk_token, const std::string& file);

  int vocab_size() const { return static_cast<int>(token_bytes_.size()); }  // largest id + 1
  // The document separator: <|endoftext|> (GPT-2), <|end_of_text|> (Llama 3)
  // or </s> (SentencePiece); -1 when absent.
  int eot_id() const { return eot_id_; }
  // The token a document starts with, where the vocabulary's model expects one
  // (Llama 3's <|begin_of_text|>, SentencePiece's <s>); -1 for GPT-2, whose
  // documents only end.
  int bos_id() const { return bos_id_; }
  // SentencePiece's unk_token (never produced: byte_fallback covers every
  // character); -1 for byte-level BPE.
  int unk_id() const { return unk_id_; }
  PreTokenizer pre_tokenizer() const { return pre_; }
  // The text is put in Unicode NFC before it is split (normalize_nfc.h).
  bool normalizes_nfc() const { return nfc_; }
  // A point where text may be cut without changing its pieces (find_safe_cut
  // for this pre-tokenizer), 0 if none.
  size_t safe_cut(std::string_view text) const;
  int num_merges() const { return num_merges_; }

  // Appends the ids of text to out. cache may be null. document_start: text
  // begins a document (SentencePiece puts its "▁" there); false for the
  // second and later parts of a document cut at safe_cut points.
  void encode(std::string_view text, std::vector<int32_t>& out, WordCache* cache = nullptr,
              bool document_start = true) const;
  std::vector<int32_t> encode(std::string_view text) const;
  // Appends the BPE ids of one pre-tokenized piece (any length >= 1).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // The plain merge loop (quadratic; the reference encode_piece is tested
  // against): GPT-2's, or for SentencePiece the leftmost lowest-ranked pair first.
  void encode_piece_reference(std::string_view piece, std::vector<int32_t>& out) const;

  // The bytes of the ids, concatenated (a SentencePiece token's "▁" as a
  // space, a byte token as its byte): decode(a) + decode(b) == decode(a + b),
  // and for byte-level BPE the exact inverse of encode. An id outside the
  // vocabulary is an InputError.
  std::string decode(const int32_t* ids, size_t n) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }
  // The text of ids that start a document: decode, less the one space
  // SentencePiece put before the document (as Hugging Face's decoder strips
  // it). decode_document(encode(text)) == text, but that a SentencePiece
  // tokenizer reads "▁" in the text as a space and the Metaspace form drops
  // a space the text starts with (it puts no "▁" before one).
  std::string decode_document(const std::vector<int32_t>& ids) const;
  const std::string& token_bytes(int id) const { return token_bytes_[id]; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  // Pieces up to this many bytes merge on the stack with the quadratic loop
  // (fastest for short words); longer ones use a heap, which gives the same ids.
  static constexpr size_t kShortPiece = 64;
  // Open-addressing table (left id, right id) -> merge; the hot lookup of BPE.
  // Key and value share a 16-byte slot so a probe touches one cache line.
  struct PairTable {
    struct Slot {
      uint64_t key;
      Merge merge;
    };
    std::vector<Slot> slots;
    uint64_t mask = 0;
    int shift = 60;
    void build(const std::vector<std::pair<uint64_t, Merge>>& items);
    // Fibonacci hashing: the top bits of key * 2^64/phi mix both ids.
    uint64_t home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift; }
    const Merge* find(int32_t a, int32_t b) const {
      uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
      for (uint64_t i = home(key);; i = (i + 1) & mask) {
        const Slot& s = slots[i];
        if (s.key == key) return &s.merge;
        if (s.key == kEmpty) return nullptr;
      }
    }
    static constexpr uint64_t kEmpty = ~0ull;
  };
  // encode of text already normalized.
  void encode_normalized(std::string_view text, std::vector<int32_t>& out, WordCache* cache,
                         bool document_start) const;
  void encode_long_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_cached(std::string_view piece, std::vector<int32_t>& out, WordCache* cache) const;

  // A piece's characters as initial symbols: the character's token, else its
  // bytes' <0xNN> tokens (byte_fallback); a space is "▁". Returns the count.
  size_t spm_symbols(std::string_view piece, int32_t* out) const;
  void encode_spm_piece(std::string_view piece, std::vector<int32_t>& out, bool reference) const;
  // Hugging Face's BPE merge order: the lowest-ranked pair, leftmost first,
  // new pairs competing at once. pair[i] holds the merge of (word[i],
  // word[i+1]); returns the new length.
  size_t merge_lowest_first(int32_t* word, const Merge** pair, size_t len) const;
  // The same order by a heap of (rank, position), as Hugging Face does it: O(n log n).
  void merge_by_heap(std::vector<int32_t>& word) const;

  std::vector<std::string> token_bytes_;  // id -> bytes
  int32_t byte_id_[256];
  PairTable pairs_;
  int eot_id_ = -1;
  int bos_id_ = -1;
  int unk_id_ = -1;
  int num_merges_ = 0;
  PreTokenizer pre_ = PreTokenizer::gpt2;
  bool nfc_ = false;  // an NFC normalizer (Qwen2)
  // ignore_merges (Llama 3): a piece that is itself in the vocabulary is that
  // one token, whatever the merges would build. Byte string -> id.
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> whole_;
  // SentencePiece: its form, each ASCII byte's initial symbol (a space's is
  // "▁"'s), and the other characters the vocabulary has (code point -> id).
  SpmForm spm_;
  int32_t spm_ascii_[128];
  std::unordered_map<uint32_t, int32_t> spm_char_;
};

// GPT-2's reversible map of the 256 byte values to printable code points (the
// alphabet vocabulary files are written in).
const uint32_t* byte_to_unicode_table();

}  // namespace trainer::engine::data
