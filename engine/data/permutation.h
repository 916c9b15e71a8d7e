// A pseudo-random permutation of [0, n) computed one index at a time (a
// Feistel network with cycle walking): shuffling an epoch of any size costs no
// memory and no set-up, and any rank can map any global index independently.
#pragma once

#include <cstdint>

namespace trainer::engine::data {

inline uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key) : n_(n) {
    int bits = 2;
    while (bits < 64 && (uint64_t(1) << bits) < n) ++bits;
    bits += bits & 1;
    half_ = bits / 2;
    mask_ = (uint64_t(1) << half_) - 1;
    for (int r = 0; r < kRounds; ++r) keys_[r] = mix64(key ^ mix64(uint64_t(r) + 0x51ED270B27A1ull));
  }
  // Bijective on [0, n): i < n gives a distinct value < n.
  uint64_t operator()(uint64_t i) const {
    uint64_t x = i;
    do x = round_trip(x);
    while (x >= n_);  // cycle walking: at most 4x the domain, a few steps expected
    return x;
  }

 private:
  static constexpr int kRounds = 4;
  uint64_t round_trip(uint64_t x) const {
    uint64_t left = x >> half_, right = x & mask_;
    for (int r = 0; r < kRounds; ++r) {
      uint64_t next = left ^ (mix64(right ^ keys_[r]) & mask_);
      left = right;
      right = next;
    }
    return (left << half_) | right;
  }
  uint64_t n_;
  int half_;
  uint64_t mask_;
  uint64_t keys_[kRounds];
};

}  // namespace trainer::engine::data
