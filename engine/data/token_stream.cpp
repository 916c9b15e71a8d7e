// Reading and checking token ids of any stored width.
#include "engine/data/token_stream.h"

#include <cstring>

#include "kernels/error.h"

namespace trainer::engine::data {

int token_type_size(TokenType t) {
  switch (t) {
    case TokenType::u8: case TokenType::i8: return 1;
    case TokenType::i16: case TokenType::u16: return 2;
    case TokenType::i32: return 4;
    case TokenType::i64: return 8;
  }
  return 0;
}

const char* to_string(TokenType t) {
  switch (t) {
    case TokenType::u8: return "uint8";
    case TokenType::i8: return "int8";
    case TokenType::i16: return "int16";
    case TokenType::u16: return "uint16";
    case TokenType::i32: return "int32";
    case TokenType::i64: return "int64";
  }
  return "?";
}

namespace {

template <class T>
void copy_checked(const TokenStream& s, int64_t first, int count, int vocab_size, int32_t* out) {
  const uint8_t* p = s.base + first * int64_t(sizeof(T));
  bool bad = false;
  for (int i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));  // Megatron .bin data need not be aligned
    bad |= !(int64_t(v) >= 0 && int64_t(v) < vocab_size);
    out[i] = static_cast<int32_t>(v);
  }
  if (!bad) return;
  for (int i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    if (int64_t(v) < 0 || int64_t(v) >= vocab_size)
      throw InputError(fmt::format("{}: byte offset {}: token id {} is outside the vocabulary (model.vocab_size {})",
                                   *s.path, s.base_offset + (first + i) * sizeof(T), int64_t(v), vocab_size));
  }
}

}  // namespace

void read_tokens(const TokenStream& s, int64_t first, int count, int vocab_size, int32_t* out) {
  TRAINER_CHECK(first >= 0 && first + count <= s.num_tokens, "token range [{}, {}) outside {} tokens of {}",
                first, first + count, s.num_tokens, *s.path);
  switch (s.type) {
    case TokenType::u8: return copy_checked<uint8_t>(s, first, count, vocab_size, out);
    case TokenType::i8: return copy_checked<int8_t>(s, first, count, vocab_size, out);
    case TokenType::i16: return copy_checked<int16_t>(s, first, count, vocab_size, out);
    case TokenType::u16: return copy_checked<uint16_t>(s, first, count, vocab_size, out);
    case TokenType::i32: return copy_checked<int32_t>(s, first, count, vocab_size, out);
    case TokenType::i64: return copy_checked<int64_t>(s, first, count, vocab_size, out);
  }
}

}  // namespace trainer::engine::data
