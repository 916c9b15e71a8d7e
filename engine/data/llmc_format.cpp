// Reading and writing llm.c token shards.
#include "engine/data/llmc_format.h"

#include <cstring>

#include "kernels/error.h"

namespace trainer::engine::data {
namespace {
constexpr size_t kBufTokens = size_t(1) << 20;
}

bool has_llmc_magic(const uint8_t* data, size_t size) {
  if (size < 4) return false;
  int32_t magic;
  std::memcpy(&magic, data, 4);
  return magic == kLlmcMagic;
}

TokenStream open_llmc_shard(const MappedFile& file) {
  const std::string& path = file.path();
  TRAINER_INPUT_CHECK(file.size() >= kLlmcHeaderBytes,
                      "{}: truncated llm.c shard: {} bytes, shorter than its 1024-byte header", path,
                      file.size());
  int32_t header[3];
  std::memcpy(header, file.data(), sizeof(header));
  TRAINER_INPUT_CHECK(header[0] == kLlmcMagic,
                      "{}: byte offset 0: expected llm.c magic number {}, found {}", path, kLlmcMagic,
                      header[0]);
  TRAINER_INPUT_CHECK(header[1] == kLlmcVersion,
                      "{}: byte offset 4: expected llm.c version {} (uint16 tokens), found {}", path,
                      kLlmcVersion, header[1]);
  TRAINER_INPUT_CHECK(header[2] >= 0, "{}: byte offset 8: negative token count {}", path, header[2]);
  const uint64_t expected = kLlmcHeaderBytes + 2 * uint64_t(header[2]);
  TRAINER_INPUT_CHECK(file.size() == expected,
                      "{}: file size {} does not match its header (token count {} at byte offset 8 "
                      "means {} bytes){}",
                      path, file.size(), header[2], expected,
                      file.size() < expected ? ": truncated file" : "");
  TokenStream s;
  s.path = &file.path();
  s.base = file.data() + kLlmcHeaderBytes;
  s.base_offset = kLlmcHeaderBytes;
  s.num_tokens = header[2];
  s.type = TokenType::u16;
  return s;
}

LlmcShardWriter::LlmcShardWriter(const std::string& path)
    : file_(std::make_unique<AtomicFile>(path)), buf_(new uint16_t[kBufTokens]) {
  int32_t header[kLlmcHeaderInts] = {};
  file_->write(header, sizeof(header));
}

void LlmcShardWriter::flush() {
  file_->write(buf_.get(), buf_len_ * sizeof(uint16_t));
  buf_len_ = 0;
}

void LlmcShardWriter::append(const int32_t* ids, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    TRAINER_INPUT_CHECK(ids[i] >= 0 && ids[i] <= 0xFFFF,
                        "{}: token id {} does not fit the llm.c format's uint16 (use --format megatron)",
                        file_->path(), ids[i]);
    if (buf_len_ == kBufTokens) flush();
    buf_[buf_len_++] = static_cast<uint16_t>(ids[i]);
  }
  num_tokens_ += static_cast<int64_t>(n);
  TRAINER_INPUT_CHECK(num_tokens_ <= INT32_MAX, "{}: more than 2^31-1 tokens in one llm.c shard",
                      file_->path());
}

void LlmcShardWriter::finish() {
  flush();
  int32_t header[3] = {kLlmcMagic, kLlmcVersion, static_cast<int32_t>(num_tokens_)};
  file_->pwrite_at(0, header, sizeof(header));
  file_->close();
}

void LlmcShardWriter::commit() { file_->commit(); }

}  // namespace trainer::engine::data
