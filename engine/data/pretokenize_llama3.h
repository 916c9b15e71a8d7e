// Llama 3's pre-tokenizer (tiktoken's cl100k pattern, the Split regex of its
// tokenizer.json) as a hand-written matcher over UTF-8, like pretokenize.h's
// GPT-2 one. It splits text exactly as
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// does: the first alternative that matches at a position wins, each taking
// its longest match. Invalid UTF-8 bytes count as `other` characters.
// Qwen2's pattern is the same with \p{N} for \p{N}{1,3}: max_digits 1.
#pragma once

#include <cstddef>
#include <string_view>

#include "engine/data/pretokenize.h"

namespace trainer::engine::data {

namespace llama3_detail {

inline bool is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// (?i:...) folds case by Unicode's rules: for these letters ASCII, and
// U+017F LATIN SMALL LETTER LONG S, which folds to 's'.
inline uint32_t fold(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + ('a' - 'A');
  return cp == 0x17F ? 's' : cp;
}

}  // namespace llama3_detail

// Calls emit(begin, end) for each piece of text, in order; pieces cover text.
template <class Emit>
void pretokenize_llama3(std::string_view text, Emit&& emit, int max_digits = 3) {
  using llama3_detail::fold;
  using llama3_detail::is_crlf;
  const size_t n = text.size();
  size_t i = 0;
  auto run_of = [&](size_t j, CharClass cls) {  // end of the run of `cls` characters from j
    while (j < n) {
      const Utf8Char d = decode_utf8(text, j);
      if (d.cls != cls) break;
      j += d.len;
    }
    return j;
  };
  while (i < n) {
    const Utf8Char c = decode_utf8(text, i);
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c.cp == '\'' && i + 1 < n) {
      const Utf8Char a = decode_utf8(text, i + 1);
      const uint32_t fa = fold(a.cp);
      if (fa == 's' || fa == 't' || fa == 'm' || fa == 'd') {
        emit(i, i + 1 + a.len);
        i += 1 + a.len;
        continue;
      }
      if (i + 1 + a.len < n) {
        const Utf8Char b = decode_utf8(text, i + 1 + a.len);
        const uint32_t fb = fold(b.cp);
        if ((fa == 'r' && fb == 'e') || (fa == 'v' && fb == 'e') || (fa == 'l' && fb == 'l')) {
          emit(i, i + 1 + a.len + b.len);
          i += 1 + a.len + b.len;
          continue;
        }
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+: letters, after at most one character that is
    // neither a letter, a number nor CR/LF (a space, a tab, punctuation).
    const bool lead = c.cls != CharClass::letter && c.cls != CharClass::number && !is_crlf(c.cp) &&
                      i + c.len < n && decode_utf8(text, i + c.len).cls == CharClass::letter;
    if (c.cls == CharClass::letter || lead) {
      const size_t end = run_of(lead ? i + c.len : i, CharClass::letter);
      emit(i, end);
      i = end;
      continue;
    }
    // \p{N}{1,max_digits}
    if (c.cls == CharClass::number) {
      size_t end = i;
      for (int k = 0; k < max_digits && end < n; ++k) {
        const Utf8Char d = decode_utf8(text, end);
        if (d.cls != CharClass::number) break;
        end += d.len;
      }
      emit(i, end);
      i = end;
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*: other characters, after at most one space,
    // with the line breaks that follow them.
    size_t start = i;
    if (c.cp == ' ' && i + 1 < n && decode_utf8(text, i + 1).cls == CharClass::other) start = i + 1;
    if (decode_utf8(text, start).cls == CharClass::other) {
      size_t end = run_of(start, CharClass::other);
      while (end < n && (text[end] == '\r' || text[end] == '\n')) ++end;
      emit(i, end);
      i = end;
      continue;
    }
    // Whitespace from here on. \s*[\r\n]+: up to the run's last line break.
    size_t j = i, last = i, after_break = 0;
    while (j < n) {
      const Utf8Char d = decode_utf8(text, j);
      if (d.cls != CharClass::space) break;
      if (is_crlf(d.cp)) after_break = j + d.len;
      last = j;
      j += d.len;
    }
    if (after_break > 0) {
      emit(i, after_break);
      i = after_break;
      continue;
    }
    // \s+(?!\S)|\s+: the run, less its last character when a non-space
    // follows (that one starts the next piece), unless it is the only one.
    const size_t end = (j == n || last == i) ? j : last;
    emit(i, end);
    i = end;
  }
}

// find_safe_cut for this pattern: a line break after punctuation joins its
// piece (" ?[^\s\p{L}\p{N}]+[\r\n]*"), so a cut before '\n' needs a letter
// or digit before it.
size_t find_safe_cut_llama3(std::string_view text);

}  // namespace trainer::engine::data
