// Character classes of the GPT-2 pre-tokenizer: letter (\p{L}), number (\p{N}),
// whitespace (\s) or other, from the generated range tables in unicode_tables.cpp.
#pragma once

#include <cstdint>

namespace trainer::engine::data {

struct CodeRange {
  uint32_t lo, hi;  // inclusive
};

extern const CodeRange kLetterRanges[];
extern const int kLetterRangeCount;
extern const CodeRange kNumberRanges[];
extern const int kNumberRangeCount;
extern const CodeRange kSpaceRanges[];
extern const int kSpaceRangeCount;

enum class CharClass : uint8_t { letter, number, space, other };

// Class of any code point from the range tables (invalid code points are `other`).
CharClass char_class_slow(uint32_t cp);
extern const CharClass kAsciiClass[128];

// Class of one code point.
inline CharClass char_class(uint32_t cp) { return cp < 128 ? kAsciiClass[cp] : char_class_slow(cp); }

}  // namespace trainer::engine::data
