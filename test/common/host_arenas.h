// Host arenas for a model built directly in a test (no Trainer): one
// zeroed, 256-byte aligned block per buffer category, bound to the model.
#pragma once

#include <cstdint>
#include <vector>

#include "model/buffers.h"

namespace trainer::testing {

class HostArenas {
 public:
  explicit HostArenas(model::Buffers& b) {
    for (int c = 0; c < model::kNumCategories; ++c) {
      auto cat = static_cast<model::Category>(c);
      blocks_.emplace_back(b.category_bytes(cat) + 256, 0);
      char* base = blocks_.back().data();
      base += (256 - reinterpret_cast<uintptr_t>(base) % 256) % 256;
      b.bind(cat, base, Device::cpu);
    }
  }

 private:
  std::vector<std::vector<char>> blocks_;
};

}  // namespace trainer::testing
