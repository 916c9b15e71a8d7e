// The Unicode data NFC needs, generated from the Unicode Character Database
// by gen_nfc_tables.js into nfc_tables.cpp. Each table is sorted by its key.
#pragma once

#include <cstdint>

namespace trainer::engine::data::nfc_data {

struct CombiningClass {
  uint32_t cp;
  uint8_t ccc;  // canonical combining class, non-zero (absent: 0)
};
struct Decomposition {
  uint32_t cp;
  uint32_t first, second;  // one level of canonical decomposition; second 0 for a singleton
};
struct Composition {
  uint32_t first, second;  // key
  uint32_t composite;      // a primary composite (not excluded from composition)
};

extern const CombiningClass kCombiningClasses[];
extern const int kCombiningClassCount;
extern const Decomposition kDecompositions[];
extern const int kDecompositionCount;
extern const Composition kCompositions[];
extern const int kCompositionCount;

}  // namespace trainer::engine::data::nfc_data
