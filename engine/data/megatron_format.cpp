// Reading and writing Megatron-LM indexed datasets (.bin + .idx).
#include "engine/data/megatron_format.h"

#include <cstring>

#include "kernels/error.h"

namespace trainer::engine::data {
namespace {

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

bool has_megatron_magic(const uint8_t* data, size_t size) {
  return size >= 9 && std::memcmp(data, kMegatronMagic, 9) == 0;
}

bool token_type_from_megatron(int code, TokenType* out) {
  switch (code) {
    case 1: *out = TokenType::u8; return true;
    case 2: *out = TokenType::i8; return true;
    case 3: *out = TokenType::i16; return true;
    case 4: *out = TokenType::i32; return true;
    case 5: *out = TokenType::i64; return true;
    case 8: *out = TokenType::u16; return true;
    default: return false;
  }
}

int megatron_code(TokenType t) {
  switch (t) {
    case TokenType::u8: return 1;
    case TokenType::i8: return 2;
    case TokenType::i16: return 3;
    case TokenType::i32: return 4;
    case TokenType::i64: return 5;
    case TokenType::u16: return 8;
  }
  return 0;
}

TokenType megatron_type_for_vocab(int vocab_size) {
  return vocab_size < 65500 ? TokenType::u16 : TokenType::i32;
}

TokenStream open_megatron(const MappedFile& idx, const MappedFile& bin, MegatronIndex* index) {
  const std::string& path = idx.path();
  const uint8_t* p = idx.data();
  const size_t size = idx.size();
  TRAINER_INPUT_CHECK(size >= kMegatronHeaderBytes,
                      "{}: truncated Megatron index: {} bytes, shorter than its {}-byte header", path,
                      size, kMegatronHeaderBytes);
  TRAINER_INPUT_CHECK(has_megatron_magic(p, size),
                      "{}: byte offset 0: expected Megatron index magic \"MMIDIDX\\x00\\x00\"", path);
  const uint64_t version = load<uint64_t>(p + 9);
  TRAINER_INPUT_CHECK(version == 1, "{}: byte offset 9: expected version 1, found {}", path, version);
  const int code = p[17];
  TokenType type;
  TRAINER_INPUT_CHECK(token_type_from_megatron(code, &type),
                      "{}: byte offset 17: dtype code {} is not an integer token type (expected 1, 2, "
                      "3, 4, 5 or 8)",
                      path, code);
  const uint64_t num_seq = load<uint64_t>(p + 18);
  const uint64_t doc_count = load<uint64_t>(p + 26);
  TRAINER_INPUT_CHECK(num_seq < (uint64_t(1) << 40) && doc_count >= 1 && doc_count < (uint64_t(1) << 40),
                      "{}: byte offset 18: implausible sequence count {} / document count {}", path,
                      num_seq, doc_count);
  const uint64_t lengths_at = kMegatronHeaderBytes;
  const uint64_t pointers_at = lengths_at + 4 * num_seq;
  const uint64_t docs_at = pointers_at + 8 * num_seq;
  const uint64_t expected = docs_at + 8 * doc_count;
  // Megatron may append per-sequence modes (multimodal); a longer file is accepted.
  TRAINER_INPUT_CHECK(size >= expected,
                      "{}: truncated Megatron index: {} bytes, but {} sequences and {} document "
                      "entries need {}",
                      path, size, num_seq, doc_count, expected);
  const int item = token_type_size(type);
  index->type = type;
  index->num_sequences = static_cast<int64_t>(num_seq);
  index->num_documents = static_cast<int64_t>(doc_count) - 1;
  index->sequence_lengths.resize(num_seq);
  uint64_t next_pointer = 0;
  for (uint64_t i = 0; i < num_seq; ++i) {
    int32_t len = load<int32_t>(p + lengths_at + 4 * i);
    int64_t ptr = load<int64_t>(p + pointers_at + 8 * i);
    TRAINER_INPUT_CHECK(len >= 0, "{}: byte offset {}: negative sequence length {}", path,
                        lengths_at + 4 * i, len);
    TRAINER_INPUT_CHECK(uint64_t(ptr) == next_pointer,
                        "{}: byte offset {}: sequence {} starts at .bin byte {}, expected {} (sequences "
                        "must be stored back to back)",
                        path, pointers_at + 8 * i, i, ptr, next_pointer);
    index->sequence_lengths[i] = len;
    next_pointer += uint64_t(len) * item;
  }
  index->document_index.resize(doc_count);
  int64_t prev = 0;
  for (uint64_t i = 0; i < doc_count; ++i) {
    int64_t d = load<int64_t>(p + docs_at + 8 * i);
    TRAINER_INPUT_CHECK((i == 0 ? d == 0 : d >= prev) && d <= int64_t(num_seq),
                        "{}: byte offset {}: document index {} is {}, expected {} (non-decreasing, at "
                        "most the sequence count {})",
                        path, docs_at + 8 * i, i, d, i == 0 ? "0" : "a value", num_seq);
    index->document_index[i] = prev = d;
  }
  TRAINER_INPUT_CHECK(prev == int64_t(num_seq),
                      "{}: byte offset {}: last document index is {}, expected the sequence count {}",
                      path, docs_at + 8 * (doc_count - 1), prev, num_seq);
  TRAINER_INPUT_CHECK(bin.size() == next_pointer,
                      "{}: size {} bytes does not match its index {} ({} tokens of {} = {} bytes){}",
                      bin.path(), bin.size(), path, next_pointer / item, to_string(type), next_pointer,
                      bin.size() < next_pointer ? ": truncated file" : "");
  TokenStream s;
  s.path = &bin.path();
  s.base = bin.data();
  s.base_offset = 0;
  s.num_tokens = static_cast<int64_t>(next_pointer / item);
  s.type = type;
  return s;
}

MegatronWriter::MegatronWriter(const std::string& prefix, TokenType type)
    : bin_(std::make_unique<AtomicFile>(prefix + ".bin")),
      idx_(std::make_unique<AtomicFile>(prefix + ".idx")),
      type_(type) {
  TRAINER_CHECK(type == TokenType::u16 || type == TokenType::i32, "Megatron writer: uint16 or int32 only");
}

void MegatronWriter::add_document(const int32_t* ids, size_t n) {
  TRAINER_INPUT_CHECK(n <= size_t(INT32_MAX), "{}: a document of {} tokens exceeds Megatron's int32 length",
                      bin_->path(), n);
  const int item = token_type_size(type_);
  buf_.resize(n * item);
  if (type_ == TokenType::u16) {
    for (size_t i = 0; i < n; ++i) {
      TRAINER_INPUT_CHECK(ids[i] >= 0 && ids[i] <= 0xFFFF, "{}: token id {} does not fit uint16",
                          bin_->path(), ids[i]);
      uint16_t v = static_cast<uint16_t>(ids[i]);
      std::memcpy(buf_.data() + 2 * i, &v, 2);
    }
  } else {
    std::memcpy(buf_.data(), ids, n * 4);
  }
  bin_->write(buf_.data(), buf_.size());
  lengths_.push_back(static_cast<int32_t>(n));
  num_tokens_ += static_cast<int64_t>(n);
}

void MegatronWriter::finish() {
  const uint64_t num_seq = lengths_.size();
  const uint64_t doc_count = num_seq + 1;
  std::vector<uint8_t> out;
  out.reserve(kMegatronHeaderBytes + num_seq * 12 + doc_count * 8);
  auto put = [&out](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  const uint64_t version = 1;
  const uint8_t code = static_cast<uint8_t>(megatron_code(type_));
  put(kMegatronMagic, 9);
  put(&version, 8);
  put(&code, 1);
  put(&num_seq, 8);
  put(&doc_count, 8);
  put(lengths_.data(), 4 * num_seq);
  int64_t ptr = 0;
  for (int32_t len : lengths_) {
    put(&ptr, 8);
    ptr += int64_t(len) * token_type_size(type_);
  }
  for (uint64_t d = 0; d < doc_count; ++d) {
    int64_t v = static_cast<int64_t>(d);
    put(&v, 8);
  }
  idx_->write(out.data(), out.size());
  bin_->close();
  idx_->close();
}

void MegatronWriter::commit() {
  bin_->commit();
  idx_->commit();
}

}  // namespace trainer::engine::data
