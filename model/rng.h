// Counter-based initialisation RNG: element i of parameter `name` depends only
// on (seed, name, i), so any shard on any mesh creates its own slice of the
// same global weights without communication.
#pragma once

#include <cstdint>
#include <string_view>

namespace trainer::model {

uint64_t hash_name(std::string_view name);
// 64 uniform random bits for element `index` of the stream `key`.
uint64_t counter_bits(uint64_t seed, uint64_t key, uint64_t index);
// A standard normal sample for global element `index` of the stream `key`.
float normal_at(uint64_t seed, uint64_t key, uint64_t index);

}  // namespace trainer::model
