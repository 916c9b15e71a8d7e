// GPT-2's pre-tokenizer as a hand-written state machine over UTF-8 bytes. It
// splits text exactly as the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does (leftmost alternative first, greedy runs). Bytes that are not valid UTF-8
// count as `other` characters, one byte each, so every input byte lands in
// exactly one piece and byte-level BPE round-trips any input.
#pragma once

#include <cstddef>
#include <string_view>

#include "engine/data/unicode_tables.h"

namespace trainer::engine::data {

struct Utf8Char {
  CharClass cls;
  uint32_t cp;   // the code point; 0xFFFFFFFF for an invalid byte
  uint32_t len;  // bytes, 1..4
};

// Decodes the character at text[pos] (pos < text.size()).
inline Utf8Char decode_utf8(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  unsigned char b0 = s[pos];
  if (b0 < 0x80) return {char_class(b0), b0, 1};
  uint32_t cp;
  uint32_t len;
  uint32_t min_cp;
  if ((b0 & 0xE0) == 0xC0) { cp = b0 & 0x1F; len = 2; min_cp = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { cp = b0 & 0x0F; len = 3; min_cp = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { cp = b0 & 0x07; len = 4; min_cp = 0x10000; }
  else return {CharClass::other, 0xFFFFFFFFu, 1};
  if (pos + len > n) return {CharClass::other, 0xFFFFFFFFu, 1};
  for (uint32_t k = 1; k < len; ++k) {
    unsigned char b = s[pos + k];
    if ((b & 0xC0) != 0x80) return {CharClass::other, 0xFFFFFFFFu, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return {CharClass::other, 0xFFFFFFFFu, 1};
  return {char_class(cp), cp, len};
}

// Calls emit(begin, end) for each piece of text, in order; pieces cover text.
template <class Emit>
void pretokenize(std::string_view text, Emit&& emit) {
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const Utf8Char c = decode_utf8(text, i);
    if (c.cp == '\'' && i + 1 < n) {
      char a = text[i + 1];
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        char b = text[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          emit(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a run of one class, optionally after one space.
    CharClass run_cls = c.cls;
    size_t j = i + c.len;
    if (c.cls == CharClass::space) {
      run_cls = CharClass::space;
      if (c.cp == ' ' && j < n) {
        const Utf8Char d = decode_utf8(text, j);
        if (d.cls != CharClass::space) {
          run_cls = d.cls;
          j += d.len;
        }
      }
    }
    if (run_cls != CharClass::space) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
      while (j < n) {
        if (bytes[j] < 0x80) {  // ASCII fast path
          if (kAsciiClass[bytes[j]] != run_cls) break;
          ++j;
          continue;
        }
        const Utf8Char d = decode_utf8(text, j);
        if (d.cls != run_cls) break;
        j += d.len;
      }
      emit(i, j);
      i = j;
      continue;
    }
    // `\s+(?!\S)|\s+`: a whitespace run; when a non-space follows, the last
    // whitespace character is left to start the next piece (unless it is the only one).
    size_t last = i;
    while (j < n) {
      const Utf8Char d = decode_utf8(text, j);
      if (d.cls != CharClass::space) break;
      last = j;
      j += d.len;
    }
    size_t end = (j == n || last == i) ? j : last;
    emit(i, end);
    i = end;
  }
}

// A place where text may be cut into independently tokenized parts without
// changing the pieces: returns p in (0, text.size()) such that text[p-1] is a
// printable ASCII non-space byte and text[p] is ' ' or '\n' (no piece spans
// such a point), searching backwards from the end; 0 if there is none.
size_t find_safe_cut(std::string_view text);

}  // namespace trainer::engine::data
