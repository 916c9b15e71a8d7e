// splitmix64 as the counter hash and Box-Muller for normals: stateless, so
// parallel and sharded initialisation give identical values.
#include "model/rng.h"

#include <cmath>

namespace trainer::model {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
// Uniform in (0, 1]: never 0, so log() below is finite.
double uniform(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }
}  // namespace

uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t counter_bits(uint64_t seed, uint64_t key, uint64_t index) {
  return splitmix64(splitmix64(seed ^ splitmix64(key)) + index);
}

float normal_at(uint64_t seed, uint64_t key, uint64_t index) {
  double u1 = uniform(counter_bits(seed, key, 2 * index));
  double u2 = uniform(counter_bits(seed, key, 2 * index + 1));
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace trainer::model
