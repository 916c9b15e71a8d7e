// Parameter units and ZeRO-3's shared block region: every unit contiguous and
// padded to the shard alignment, every block at the same offsets in the
// parameter, gradient and compute-copy arenas (one block's worth), the
// embedding and head apart; without sharing the layout is the declared one.
// ZeRO-2 shares only the gradient region.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "model/model.h"
#include "test/common/tiny_model.h"

using namespace trainer;
using namespace trainer::model;

namespace {
ModelConfig config(bool llama) {
  ModelConfig cfg = testing::tiny_model_config(llama ? Family::llama : Family::gpt2, 3);
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
    shared_cfg.share_blocks = true;
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

TEST_CASE("ZeRO-3 with experts apart: each block's routed experts are a part of their own",
          "[cpu][model]") {
  ModelConfig cfg = config(true);
  cfg.moe_enabled = true;
  cfg.moe_every = 2;  // layer 1 only
  cfg.moe.n_experts = 4;
  cfg.moe.d_ff_expert = 8;
  cfg.moe.n_shared_experts = 1;
  cfg.moe.ep = 2;
  const int64_t align = 4 * 64;  // dp 4 (ep 2 x edp 2)
  cfg.shard_align = align;
  cfg.share_blocks = true;
  ModelConfig together_cfg = cfg;
  cfg.shard_experts_apart = true;
  Model apart(cfg, BatchShape{1, 4}), together(together_cfg, BatchShape{1, 4});
  const Buffers &s = apart.buffers(), &t = together.buffers();
  REQUIRE(s.param_units().size() == t.param_units().size());
  for (size_t i = 0; i < s.param_units().size(); ++i) {
    const Buffers::ParamUnit &u = s.param_units()[i], &w = t.param_units()[i];
    INFO("unit " << i);
    REQUIRE(w.parts.size() == 1);  // at ep 1 layouts the unit is one part
    CHECK(w.parts[0].padded == w.padded);
    // The MoE block: attention, norms, router, shared expert | 2 local routed experts.
    REQUIRE(u.parts.size() == (i == 2 ? 2u : 1u));
    int64_t at = u.first;
    for (size_t k = 0; k < u.parts.size(); ++k) {
      const Buffers::ParamUnit::Part& part = u.parts[k];
      CHECK(part.expert == (u.parts.size() == 2 && k == 1));
      CHECK(part.first == at);
      CHECK(part.padded % align == 0);
      CHECK(part.param_begin == (k == 0 ? u.param_begin : u.parts[k - 1].param_end));
      for (int p = part.param_begin; p < part.param_end; ++p) {
        const BufferInfo& v = s.buffers()[s.params()[p].value];
        CHECK(s.params()[p].spec.expert == part.expert);
        CHECK(int64_t(v.offset / 4) >= part.first);
        CHECK(int64_t((v.offset + v.bytes) / 4) <= part.first + part.padded);
        CHECK(s.buffers()[s.params()[p].grad].offset == v.offset);
      }
      at += part.padded;
    }
    CHECK(u.parts.back().param_end == u.param_end);
    CHECK(at == u.first + u.padded);
  }
}

TEST_CASE("ZeRO-2: blocks share one gradient region; parameters and compute copies stay whole",
          "[cpu][model]") {
  for (bool moe : {false, true}) {
    INFO((moe ? "moe, experts apart" : "llama"));
    ModelConfig cfg = config(true);
    if (moe) {
      cfg.moe_enabled = true;
      cfg.moe_every = 2;
      cfg.moe.n_experts = 4;
      cfg.moe.d_ff_expert = 8;
      cfg.moe.ep = 2;
      cfg.shard_experts_apart = true;
    }
    const int64_t align = 4 * 64;
    ModelConfig padded_cfg = cfg;
    padded_cfg.shard_align = align;  // ZeRO 1 by unit part: the same parameter layout
    ModelConfig grads_cfg = padded_cfg;
    grads_cfg.share_block_grads = true;
    Model padded(padded_cfg, BatchShape{1, 4}), grads(grads_cfg, BatchShape{1, 4});
    const Buffers &p = padded.buffers(), &s = grads.buffers();
    CHECK_FALSE(s.blocks_shared());
    CHECK(s.block_grads_shared());
    CHECK(s.category_bytes(Category::parameters) == p.category_bytes(Category::parameters));
    CHECK(s.category_bytes(Category::compute_weights) == p.category_bytes(Category::compute_weights));
    REQUIRE(s.param_units().size() == 5);
    std::set<int64_t> grad_starts;
    int64_t largest = 0, whole_step = 0;
    for (size_t i = 0; i < s.param_units().size(); ++i) {
      const Buffers::ParamUnit &u = s.param_units()[i], &q = p.param_units()[i];
      const bool block = i >= 1 && i <= 3;
      CHECK_FALSE(u.shared);
      CHECK(u.grads_shared == block);
      CHECK(u.first == q.first);  // parameters where ZeRO 1 has them
      CHECK(u.padded == q.padded);
      REQUIRE(u.parts.size() == q.parts.size());
      if (block) grad_starts.insert(u.grad_first);
      if (block) largest = std::max(largest, u.padded);
      if (!block) whole_step += u.padded;
      if (i == 0) CHECK(u.grad_first == u.first);
      // The head's gradients follow the one region of the blocks'.
      if (i == 4) CHECK(u.grad_first == *grad_starts.begin() + largest);
      // Each gradient sits as far from its unit's grad_first as its value from first.
      for (int k = u.param_begin; k < u.param_end; ++k) {
        const BufferInfo& v = s.buffers()[s.params()[k].value];
        const BufferInfo& g = s.buffers()[s.params()[k].grad];
        CHECK(int64_t(g.offset / 4) - u.grad_first == int64_t(v.offset / 4) - u.first);
      }
    }
    CHECK(grad_starts.size() == 1);
    CHECK(s.category_bytes(Category::gradients) == size_t(whole_step + largest) * 4);
    CHECK(s.category_bytes(Category::gradients) < s.category_bytes(Category::parameters));
  }
}

TEST_CASE("Two shared regions: blocks alternate, each region the size of its largest block",
          "[cpu][model]") {
  // 4 blocks (0 and 2 in the first region, 1 and 3 in the second); ZeRO-3
  // (parameters, gradients and compute copies) and ZeRO-2 (gradients only).
  for (bool zero3 : {true, false}) {
    INFO((zero3 ? "zero 3" : "zero 2"));
    ModelConfig one = testing::tiny_model_config(Family::llama, 4);
    one.act_dtype = DType::bf16;
    one.shard_align = 2 * 64;
    (zero3 ? one.share_blocks : one.share_block_grads) = true;
    ModelConfig two = one;
    two.shared_regions = 2;
    Model m1(one, BatchShape{1, 4}), m2(two, BatchShape{1, 4});
    const Buffers &a = m1.buffers(), &b = m2.buffers();
    CHECK(a.shared_regions() == 1);
    CHECK(b.shared_regions() == 2);
    REQUIRE(b.param_units().size() == 6);  // embedding, 4 blocks, head
    const auto& ua = a.param_units();
    const auto& ub = b.param_units();
    const int64_t block = ub[1].padded;  // the tiny model's blocks are alike
    for (int i = 1; i <= 4; ++i) {
      INFO("block " << i - 1);
      CHECK(ub[i].padded == block);
      CHECK(ub[i].region == (i - 1) % 2);
      CHECK(ua[i].region == 0);
      // The second region follows the first: one block further on.
      const int64_t shift = ub[i].region == 1 ? block : 0;
      CHECK(ub[i].grad_first == ua[i].grad_first + shift);
      CHECK(ub[i].first == ua[i].first + (zero3 ? shift : 0));
      for (size_t k = 0; k < ub[i].parts.size(); ++k)
        CHECK(ub[i].parts[k].first == ua[i].parts[k].first + (zero3 ? shift : 0));
      // Every buffer of the unit moved with it (values, gradients, compute copies).
      for (int p = ub[i].param_begin; p < ub[i].param_end; ++p) {
        const Buffers::Param &pa = a.params()[p], &pb = b.params()[p];
        CHECK(b.buffers()[pb.grad].offset == a.buffers()[pa.grad].offset + size_t(shift) * 4);
        CHECK(b.buffers()[pb.value].offset == a.buffers()[pa.value].offset + size_t(zero3 ? shift : 0) * 4);
        if (pb.compute >= 0 && zero3) {
          // Compute copies are bf16: their region is half the size, shifted by its own extent.
          CHECK((b.buffers()[pb.compute].offset > a.buffers()[pa.compute].offset) == (shift > 0));
          CHECK(b.buffers()[pb.compute].offset < b.category_bytes(Category::compute_weights));
        }
        CHECK(int64_t(b.buffers()[pb.grad].offset / 4) - ub[i].grad_first ==
              int64_t(b.buffers()[pb.value].offset / 4) - ub[i].first);
      }
    }
    CHECK(ub[1].grad_first == ub[3].grad_first);
    CHECK(ub[2].grad_first == ub[4].grad_first);
    CHECK(ub[2].grad_first == ub[1].grad_first + block);
    // The head follows both regions; each arena grows by one block.
    CHECK(ub[5].grad_first == ua[5].grad_first + block);
    CHECK(b.category_bytes(Category::gradients) == a.category_bytes(Category::gradients) + size_t(block) * 4);
    CHECK(b.category_bytes(Category::parameters) ==
          a.category_bytes(Category::parameters) + (zero3 ? size_t(block) * 4 : 0));
    if (zero3)
      CHECK(b.category_bytes(Category::compute_weights) > a.category_bytes(Category::compute_weights));
    else
      CHECK(b.category_bytes(Category::compute_weights) == a.category_bytes(Category::compute_weights));
  }
}
