// Character classification and safe cut points for the GPT-2 pre-tokenizer.
#include "engine/data/pretokenize.h"
#include "engine/data/pretokenize_llama3.h"
#include "engine/data/tokenizer_spm.h"

#include <algorithm>

namespace trainer::engine::data {
namespace {

bool in_ranges(const CodeRange* ranges, int count, uint32_t cp) {
  const CodeRange* end = ranges + count;
  const CodeRange* it =
      std::upper_bound(ranges, end, cp, [](uint32_t v, const CodeRange& r) { return v < r.lo; });
  return it != ranges && cp <= (it - 1)->hi;
}

CharClass classify(uint32_t cp) {
  if (in_ranges(kLetterRanges, kLetterRangeCount, cp)) return CharClass::letter;
  if (in_ranges(kNumberRanges, kNumberRangeCount, cp)) return CharClass::number;
  if (in_ranges(kSpaceRanges, kSpaceRangeCount, cp)) return CharClass::space;
  return CharClass::other;
}

}  // namespace

// The ASCII rows of the generated tables, as data so the hot path inlines; a
// test checks them against char_class_slow.
const CharClass kAsciiClass[128] = {
#define C(x) CharClass::x
    // 0x00-0x1F: controls; 0x09-0x0D are whitespace
    C(other), C(other), C(other), C(other), C(other), C(other), C(other), C(other),
    C(other), C(space), C(space), C(space), C(space), C(space), C(other), C(other),
    C(other), C(other), C(other), C(other), C(other), C(other), C(other), C(other),
    C(other), C(other), C(other), C(other), C(other), C(other), C(other), C(other),
    // ' ' ! " # $ % & ' ( ) * + , - . /
    C(space), C(other), C(other), C(other), C(other), C(other), C(other), C(other),
    C(other), C(other), C(other), C(other), C(other), C(other), C(other), C(other),
    // 0-9 : ; < = > ?
    C(number), C(number), C(number), C(number), C(number), C(number), C(number), C(number),
    C(number), C(number), C(other), C(other), C(other), C(other), C(other), C(other),
    // @ A-O
    C(other), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter),
    C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter),
    // P-Z [ \ ] ^ _
    C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter),
    C(letter), C(letter), C(letter), C(other), C(other), C(other), C(other), C(other),
    // ` a-o
    C(other), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter),
    C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter),
    // p-z { | } ~ DEL
    C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter), C(letter),
    C(letter), C(letter), C(letter), C(other), C(other), C(other), C(other), C(other),
#undef C
};

CharClass char_class_slow(uint32_t cp) { return classify(cp); }

namespace {

enum class NewlineCut { any, after_word, never };

// A cut before text[p] (' ' or '\n') after a printable ASCII non-space byte:
// no piece of either regex spans it, except that Llama 3's joins a line break
// to the punctuation before it, so there only a letter or digit may precede
// a '\n'; SentencePiece's pieces start only at a space ("▁").
size_t safe_cut(std::string_view text, NewlineCut newline) {
  for (size_t p = text.size(); p-- > 1;) {
    const char c = text[p];
    const unsigned char prev = static_cast<unsigned char>(text[p - 1]);
    if (prev <= 0x20 || prev >= 0x7F || (c != ' ' && c != '\n')) continue;
    const bool word = kAsciiClass[prev] == CharClass::letter || kAsciiClass[prev] == CharClass::number;
    if (c == ' ' || newline == NewlineCut::any || (newline == NewlineCut::after_word && word)) return p;
  }
  return 0;
}

}  // namespace

size_t find_safe_cut(std::string_view text) { return safe_cut(text, NewlineCut::any); }

size_t find_safe_cut_llama3(std::string_view text) { return safe_cut(text, NewlineCut::after_word); }

size_t find_safe_cut_spm(std::string_view text) { return safe_cut(text, NewlineCut::never); }

}  // namespace trainer::engine::data
