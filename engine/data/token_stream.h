// A run of stored token ids inside a mapped file (an llm.c shard's payload or
// a Megatron .bin), read as int32 with each id checked against the vocabulary.
#pragma once

#include <cstdint>
#include <string>

namespace trainer::engine::data {

enum class TokenType : uint8_t { u8, i8, i16, u16, i32, i64 };

int token_type_size(TokenType t);
const char* to_string(TokenType t);

struct TokenStream {
  const std::string* path = nullptr;  // for messages; owned by the source
  const uint8_t* base = nullptr;      // first token of the stream
  uint64_t base_offset = 0;           // byte offset of `base` in the file
  int64_t num_tokens = 0;
  TokenType type = TokenType::u16;
};

// out[0..count) = tokens [first, first+count) of s. A token outside
// [0, vocab_size) is an InputError naming the file and its byte offset.
void read_tokens(const TokenStream& s, int64_t first, int count, int vocab_size, int32_t* out);

}  // namespace trainer::engine::data
