// Character classification and safe cut points for the GPT-2 pre-tokenizer.
#include "engine/data/pretokenize.h"

#include <algorithm>

namespace trainer::engine::data {
namespace {

bool in_ranges(const CodeRange* ranges, int count, uint32_t cp) {
  const CodeRange* end = ranges + count;
  const CodeRange* it =
      std::upper_bound(ranges, end, cp, [](uint32_t v, const CodeRange& r) { return v < r.lo; });
  return it != ranges && cp <= (it - 1)->hi;
}

struct AsciiTable {
  CharClass cls[128];
  AsciiTable() {
    for (uint32_t c = 0; c < 128; ++c) {
      cls[c] = in_ranges(kLetterRanges, kLetterRangeCount, c)   ? CharClass::letter
               : in_ranges(kNumberRanges, kNumberRangeCount, c) ? CharClass::number
               : in_ranges(kSpaceRanges, kSpaceRangeCount, c)   ? CharClass::space
                                                                : CharClass::other;
    }
  }
};
const AsciiTable kAscii;

}  // namespace

CharClass char_class(uint32_t cp) {
  if (cp < 128) return kAscii.cls[cp];
  if (in_ranges(kLetterRanges, kLetterRangeCount, cp)) return CharClass::letter;
  if (in_ranges(kNumberRanges, kNumberRangeCount, cp)) return CharClass::number;
  if (in_ranges(kSpaceRanges, kSpaceRangeCount, cp)) return CharClass::space;
  return CharClass::other;
}

size_t find_safe_cut(std::string_view text) {
  for (size_t p = text.size(); p-- > 1;) {
    char c = text[p];
    unsigned char prev = static_cast<unsigned char>(text[p - 1]);
    if ((c == ' ' || c == '\n') && prev > 0x20 && prev < 0x7F) return p;
  }
  return 0;
}

}  // namespace trainer::engine::data
