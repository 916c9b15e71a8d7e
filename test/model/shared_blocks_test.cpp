// Parameter units and ZeRO-3's shared block region: every unit contiguous and
// padded to the shard alignment, every block at the same offsets in the
// parameter, gradient and compute-copy arenas (one block's worth), the
// embedding and head apart; without sharing the layout is the declared one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "model/model.h"

using namespace trainer;
using namespace trainer::model;

namespace {
ModelConfig config(bool llama) {
  ModelConfig cfg;
  cfg.family = llama ? Family::llama : Family::gpt2;
  cfg.n_layer = 3;
  cfg.d_model = 16;
  cfg.n_head = 2;
  cfg.n_kv_head = 2;
  cfg.d_ff = 32;
  cfg.vocab_size = 100;
  cfg.max_seq_len = 8;
  cfg.tie_embeddings = !llama;
  cfg.act_dtype = DType::bf16;  // compute copies too
  return cfg;
}
}  // namespace

TEST_CASE("ZeRO-3: blocks share one padded region; embedding and head keep theirs",
          "[cpu][model]") {
  for (bool llama : {false, true}) {
    INFO((llama ? "llama" : "gpt2"));
    ModelConfig plain_cfg = config(llama), shared_cfg = config(llama);
    const int64_t align = 4 * 64;  // dp 4
    shared_cfg.shard_align = align;
    Model plain(plain_cfg, BatchShape{1, 4}), shared(shared_cfg, BatchShape{1, 4});
    const Buffers &p = plain.buffers(), &s = shared.buffers();
    REQUIRE(p.param_units().size() == s.param_units().size());
    REQUIRE(s.param_units().size() == 5);  // embedding, 3 blocks, head
    std::set<int64_t> block_starts;
    int64_t largest = 0, whole_step = 0;
    for (size_t i = 0; i < s.param_units().size(); ++i) {
      const Buffers::ParamUnit &u = s.param_units()[i], &q = p.param_units()[i];
      CHECK(u.padded % align == 0);
      CHECK(u.shared == (i >= 1 && i <= 3));
      CHECK_FALSE(q.shared);
      CHECK(u.param_begin == q.param_begin);
      CHECK(u.param_end == q.param_end);
      if (u.shared) block_starts.insert(u.first);
      if (u.shared) largest = std::max(largest, u.padded);
      if (!u.shared) whole_step += u.padded;
      // Contiguous: every parameter of the unit within [first, first + padded).
      for (int k = u.param_begin; k < u.param_end; ++k) {
        const BufferInfo& v = s.buffers()[s.params()[k].value];
        const BufferInfo& g = s.buffers()[s.params()[k].grad];
        CHECK(v.offset == g.offset);
        CHECK(int64_t(v.offset / 4) >= u.first);
        CHECK(int64_t((v.offset + v.bytes) / 4) <= u.first + u.padded);
      }
    }
    CHECK(block_starts.size() == 1);  // one region for all blocks
    // Block l's parameters sit where block 0's do, compute copies included.
    const auto& units = s.param_units();
    for (int k = 0; k < units[1].param_end - units[1].param_begin; ++k) {
      const Buffers::Param &b0 = s.params()[units[1].param_begin + k],
                           &b2 = s.params()[units[3].param_begin + k];
      CHECK(s.buffers()[b0.value].offset == s.buffers()[b2.value].offset);
      if (b0.compute >= 0) CHECK(s.buffers()[b0.compute].offset == s.buffers()[b2.compute].offset);
    }
    const size_t shared_bytes = s.category_bytes(Category::parameters);
    CHECK(shared_bytes == size_t(whole_step + largest) * 4);
    CHECK(s.category_bytes(Category::gradients) == shared_bytes);
    CHECK(shared_bytes < p.category_bytes(Category::parameters));
    CHECK(s.category_bytes(Category::compute_weights) < p.category_bytes(Category::compute_weights));
    // Unshared: units tile the arena exactly as declared, nothing padded.
    int64_t end = 0;
    for (const auto& u : p.param_units()) {
      CHECK(u.first == end);
      end = u.first + u.padded;
    }
    CHECK(size_t(end) * 4 == p.category_bytes(Category::parameters));
  }
}
