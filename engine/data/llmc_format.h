// llm.c token shards: a header of 256 int32 (magic 20240520, version 1, token
// count, the rest zero), then `count` uint16 tokens; file size 1024 + 2*count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/data/mapped_file.h"
#include "engine/data/token_stream.h"

namespace trainer::engine::data {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
constexpr int kLlmcHeaderInts = 256;
constexpr size_t kLlmcHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);

// Whether the first 4 bytes are the llm.c magic number.
bool has_llmc_magic(const uint8_t* data, size_t size);

// Validates a mapped shard (magic, version, size = 1024 + 2*count) and returns
// its token stream; InputError naming the file and offset otherwise.
TokenStream open_llmc_shard(const MappedFile& file);

// Streams uint16 tokens into a shard; the header's count is filled in by
// finish(), and the file gets its final name only at commit() (AtomicFile).
class LlmcShardWriter {
 public:
  explicit LlmcShardWriter(const std::string& path);
  // Ids must be in [0, 65535]: InputError otherwise (a vocabulary this large needs Megatron's int32).
  void append(const int32_t* ids, size_t n);
  int64_t num_tokens() const { return num_tokens_; }
  void finish();  // writes the header and closes; still under the temp name
  void commit();  // renames onto the final path
  const std::string& path() const { return file_->path(); }

 private:
  std::unique_ptr<AtomicFile> file_;
  int64_t num_tokens_ = 0;
  std::unique_ptr<uint16_t[]> buf_;
  size_t buf_len_ = 0;
  void flush();
};

}  // namespace trainer::engine::data
