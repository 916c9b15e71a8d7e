// Megatron-LM indexed datasets: PREFIX.bin holds the tokens of every sequence
// back to back; PREFIX.idx is
//   "MMIDIDX\0\0" (9 bytes) | version u64 = 1 | dtype code u8 (8 = uint16, 4 = int32, ...)
//   | sequence count u64 | document count u64 (= documents + 1)
//   | sequence lengths int32[sequences] | sequence pointers int64[sequences] (byte offsets in .bin)
//   | document indices int64[document count] (0, then the end sequence of each document)
// all little-endian, unaligned, exactly as Megatron-LM's IndexedDataset reads it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/mapped_file.h"
#include "engine/data/token_stream.h"

namespace trainer::engine::data {

inline constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr size_t kMegatronHeaderBytes = 9 + 8 + 1 + 8 + 8;

bool has_megatron_magic(const uint8_t* data, size_t size);

// Megatron's dtype codes (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16) <-> ours.
bool token_type_from_megatron(int code, TokenType* out);
int megatron_code(TokenType t);

struct MegatronIndex {
  TokenType type = TokenType::u16;
  int64_t num_sequences = 0;
  int64_t num_documents = 0;               // documents (document count in the file minus one)
  std::vector<int32_t> sequence_lengths;  // tokens per sequence
  std::vector<int64_t> document_index;    // num_documents + 1 entries
};

// Parses and validates PREFIX.idx against PREFIX.bin: the magic, version and
// dtype, the file size implied by the counts, sequence pointers that run back
// to back from 0, document indices that start at 0 and end at the sequence
// count, and a .bin whose size is the sum of the lengths. InputError naming the
// file and offset otherwise. Returns the .bin's token stream (all sequences).
TokenStream open_megatron(const MappedFile& idx, const MappedFile& bin, MegatronIndex* index);

// Writes PREFIX.bin and PREFIX.idx, one sequence per document; both keep temp
// names until commit().
class MegatronWriter {
 public:
  MegatronWriter(const std::string& prefix, TokenType type);
  void add_document(const int32_t* ids, size_t n);
  int64_t num_tokens() const { return num_tokens_; }
  void finish();  // writes the .idx; files still under temp names
  void commit();

 private:
  std::unique_ptr<AtomicFile> bin_, idx_;
  TokenType type_;
  std::vector<int32_t> lengths_;
  int64_t num_tokens_ = 0;
  std::vector<uint8_t> buf_;
};

// Megatron's dtype for a vocabulary: uint16 when it has fewer than 65500 ids, else int32.
TokenType megatron_type_for_vocab(int vocab_size);

}  // namespace trainer::engine::data
