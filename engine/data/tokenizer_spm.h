// SentencePiece-style BPE (Llama 2's and Mistral's tokenizer.json): where its
// pieces start. The merges themselves are Tokenizer's (tokenizer_spm.cpp).
#pragma once

#include <cstddef>
#include <string_view>

namespace trainer::engine::data {

// Bytes of the "▁" at text[i]: 1 for a space, 3 for U+2581 itself (the
// normalizer makes every space one, so the two are the same symbol), else 0.
inline size_t spm_space_len(std::string_view text, size_t i) {
  if (text[i] == ' ') return 1;
  return text.compare(i, 3, "\xE2\x96\x81") == 0 ? 3 : 0;
}

// Calls emit(begin, end) for each piece of text, in order; pieces cover text.
// With Metaspace's split every "▁" starts a piece, as Hugging Face splits.
// Without it Hugging Face merges the whole text as one word; a piece starts
// at each "▁" after other text instead, which gives the same ids because no
// merge builds a token with "▁" after other text (Tokenizer::from_spm
// refuses a vocabulary with one), and a word cache can then serve them.
template <class Emit>
void spm_pieces(std::string_view text, bool split, Emit&& emit) {
  size_t begin = 0;
  bool after_space = false;
  for (size_t i = 0; i < text.size();) {
    const size_t len = spm_space_len(text, i);
    if (len == 0) {
      after_space = false;
      ++i;
      continue;
    }
    if (i > begin && (split || !after_space)) {
      emit(begin, i);
      begin = i;
    }
    after_space = true;
    i += len;
  }
  if (text.size() > begin) emit(begin, text.size());
}

// find_safe_cut for SentencePiece: a cut before a space after a printable
// ASCII non-space byte is where a piece starts; encoding the part after it
// with document_start false gives the ids of the whole text.
size_t find_safe_cut_spm(std::string_view text);

}  // namespace trainer::engine::data
