// Context parallelism's sequence layout (Megatron-Core's load-balanced causal
// split): each sequence of T tokens is cut into 2 * cp chunks of T / (2 cp)
// tokens, and cp rank r holds chunks r and 2 cp - 1 - r, in that order. Causal
// attention's work grows with a query's position, so pairing an early chunk
// with a late one gives every rank the same amount. Pure arithmetic shared by
// the data loader, the position embeddings, RoPE and the K/V exchange.
#pragma once

#include <cstdint>

namespace trainer::parallel {

struct CpLayout {
  int cp = 1;        // ranks in the cp group
  int rank = 0;      // this rank's index in it
  int64_t seq = 1;   // T: tokens per whole sequence (a multiple of 2 * cp)

  static constexpr int kLocalChunks = 2;
  int64_t chunk() const { return seq / (2 * cp); }
  int64_t local_tokens() const { return kLocalChunks * chunk(); }  // per sequence on a rank
  // Which of the 2 cp chunks of the sequence rank `r`'s local chunk j (0 or 1) is.
  int64_t global_chunk(int j, int r) const { return j == 0 ? r : 2 * cp - 1 - r; }
  int64_t global_chunk(int j) const { return global_chunk(j, rank); }
  // The global position of the first token of this rank's local chunk j.
  int64_t offset(int j) const { return global_chunk(j) * chunk(); }
  // fn(first, position) for each of this rank's runs of consecutive positions
  // over `sequences` sequences (each chunk of each sequence): `first` is the
  // run's first local token (b * 2c + j * c), `position` its global position.
  template <class Fn>
  void for_each_chunk(int64_t sequences, Fn fn) const {
    for (int64_t b = 0; b < sequences; ++b)
      for (int j = 0; j < kLocalChunks; ++j) fn(b * local_tokens() + j * chunk(), offset(j));
  }
};

}  // namespace trainer::parallel
