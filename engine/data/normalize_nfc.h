// Unicode normalization form C (UAX #15), Hugging Face's NFC normalizer
// (Qwen2's tokenizer.json has it): canonical decomposition, canonical
// ordering, canonical composition, with the data of nfc_tables.cpp (Unicode
// 15.0; a character assigned later is left as it is).
#pragma once

#include <string>
#include <string_view>

namespace trainer::engine::data {

// True when nfc(text) == text is certain without normalizing: every
// character is one that never decomposes, reorders or composes with the one
// before it (all of ASCII, most of every script's letters, CJK). Fast: the
// tokenizer asks it of every text.
bool nfc_unchanged(std::string_view text);

// text in NFC. Bytes that are not UTF-8 pass through unchanged and end any
// composition (Hugging Face only ever sees valid UTF-8).
std::string nfc(std::string_view text);
// The same without a copy where nfc_unchanged(text) holds: false, out left
// alone; otherwise true with nfc(text) in out. One scan of the text either way.
bool nfc_into(std::string_view text, std::string& out);

}  // namespace trainer::engine::data
