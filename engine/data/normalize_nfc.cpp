#include "engine/data/normalize_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/data/nfc_tables.h"
#include "engine/data/pretokenize.h"
#include "engine/json.h"

namespace trainer::engine::data {

namespace {

using nfc_data::kCombiningClassCount;
using nfc_data::kCombiningClasses;
using nfc_data::kCompositionCount;
using nfc_data::kCompositions;
using nfc_data::kDecompositionCount;
using nfc_data::kDecompositions;

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;
// A byte that is not UTF-8, kept in the code point stream: class 0, composes with nothing.
constexpr uint32_t kRawByte = 0x80000000u;

uint8_t combining_class(uint32_t cp) {
  const auto* end = kCombiningClasses + kCombiningClassCount;
  const auto* it = std::lower_bound(kCombiningClasses, end, cp,
                                    [](const nfc_data::CombiningClass& c, uint32_t v) { return c.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

const nfc_data::Decomposition* decomposition(uint32_t cp) {
  const auto* end = kDecompositions + kDecompositionCount;
  const auto* it = std::lower_bound(kDecompositions, end, cp,
                                    [](const nfc_data::Decomposition& d, uint32_t v) { return d.cp < v; });
  return it != end && it->cp == cp ? it : nullptr;
}

// The primary composite of a and b, 0 if none.
uint32_t composite(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* end = kCompositions + kCompositionCount;
  const auto* it = std::lower_bound(kCompositions, end, std::pair{a, b}, [](const nfc_data::Composition& c, auto key) {
    return c.first != key.first ? c.first < key.first : c.second < key.second;
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// Per code point: bit 0 "NFC_Quick_Check is not Yes" (decomposes to something
// else, or may compose with the character before it), bit 1 "combining
// class not 0" (may reorder). Derived from the tables once.
struct QuickCheck {
  std::vector<uint8_t> flags = std::vector<uint8_t>(0x110000, 0);
  QuickCheck() {
    for (int i = 0; i < kDecompositionCount; ++i) {
      const nfc_data::Decomposition& d = kDecompositions[i];
      if (d.second == 0 || composite(d.first, d.second) != d.cp) flags[d.cp] |= 1;
    }
    for (int i = 0; i < kCompositionCount; ++i) flags[kCompositions[i].second] |= 1;
    for (uint32_t v = kVBase; v < kVBase + kVCount; ++v) flags[v] |= 1;
    for (uint32_t t = kTBase + 1; t < kTBase + kTCount; ++t) flags[t] |= 1;
    for (int i = 0; i < kCombiningClassCount; ++i) flags[kCombiningClasses[i].cp] |= 2;
  }
};

const QuickCheck& quick_check() {
  static const QuickCheck q;
  return q;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / (kVCount * kTCount));
    out.push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const nfc_data::Decomposition* d = cp < kRawByte ? decomposition(cp) : nullptr) {
    decompose(d->first, out);
    if (d->second) decompose(d->second, out);
    return;
  }
  out.push_back(cp);
}

uint8_t class_of(uint32_t cp) { return cp < kRawByte ? combining_class(cp) : 0; }


}  // namespace

bool nfc_unchanged(std::string_view text) {
  const std::vector<uint8_t>& flags = quick_check().flags;
  uint8_t last = 0;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      last = 0;
      ++i;
      continue;
    }
    const Utf8Char c = decode_utf8(text, i);
    i += c.len;
    if (c.cp == 0xFFFFFFFFu) {
      last = 0;
      continue;
    }
    const uint8_t f = flags[c.cp];
    if (f & 1) return false;
    const uint8_t cls = (f & 2) ? combining_class(c.cp) : 0;
    if (cls != 0 && last > cls) return false;
    last = cls;
  }
  return true;
}

std::string nfc(std::string_view text) {
  std::string out;
  return nfc_into(text, out) ? out : std::string(text);
}

bool nfc_into(std::string_view text, std::string& normalized) {
  if (nfc_unchanged(text)) return false;
  // Canonical decomposition.
  std::vector<uint32_t> cps;
  cps.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    decompose(c.cp == 0xFFFFFFFFu ? kRawByte | static_cast<unsigned char>(text[i]) : c.cp, cps);
    i += c.len;
  }
  // Canonical ordering: each run of non-starters sorted by class, stably.
  std::vector<uint8_t> cls(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) cls[i] = class_of(cps[i]);
  for (size_t i = 1; i < cps.size(); ++i)
    for (size_t j = i; j > 0 && cls[j] != 0 && cls[j - 1] > cls[j]; --j) {
      std::swap(cps[j], cps[j - 1]);
      std::swap(cls[j], cls[j - 1]);
    }
  // Canonical composition: a character joins the last starter when no
  // character between them blocks it (one of class 0, or of a class >= its own).
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  size_t starter = 0;
  bool have_starter = false;
  int last_class = -1;  // class of the last character kept after the starter; -1: none
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    const int c = cls[i];
    if (have_starter && cp < kRawByte && last_class < c) {
      if (const uint32_t comp = composite(out[starter], cp)) {
        out[starter] = comp;
        continue;
      }
    }
    if (c == 0) {
      starter = out.size();
      have_starter = cp < kRawByte;
      last_class = -1;
    } else {
      last_class = c;
    }
    out.push_back(cp);
  }
  normalized.clear();
  normalized.reserve(text.size());
  for (uint32_t cp : out) {
    if (cp >= kRawByte) normalized += static_cast<char>(cp & 0xFF);
    else append_utf8(normalized, cp);
  }
  return true;
}

}  // namespace trainer::engine::data
