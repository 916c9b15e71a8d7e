// Shared capacity (model/moe_capacity.h's tables, kernels/moe_capacity.h's CPU
// ops) against one rank's rule: route a whole micro-batch, keep each expert's
// first `capacity` assignments in token order, split the tokens over cp chunks
// and SP blocks, and require that each rank's `taken` (its run loads counted
// by moe_run_loads, gathered as the layer gathers them, walked by
// moe_capacity_taken) makes moe_plan's prefix rule keep exactly those.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/moe_capacity.h"
#include "model/moe_capacity.h"

using trainer::Context;
using trainer::DType;
using trainer::Tensor;
using trainer::model::capacity_order;
using trainer::model::run_table;
using trainer::model::token_runs;
using trainer::model::TokenRun;

namespace {

void check_split(int cp, int tp, int64_t sequences, int64_t seq, int64_t E, int64_t K, int64_t capacity,
                 uint32_t seed) {
  INFO("cp " << cp << " tp " << tp << " sequences " << sequences << " seq " << seq << " capacity "
             << capacity);
  std::mt19937 rng(seed);
  const int64_t tokens = sequences * seq;
  // choice[n][k]: distinct experts per token, skewed so some experts overflow.
  std::vector<int32_t> choice(tokens * K);
  for (int64_t n = 0; n < tokens; ++n) {
    std::vector<int32_t> experts(E);
    for (int64_t e = 0; e < E; ++e) experts[e] = static_cast<int32_t>(e);
    for (int64_t k = 0; k < K; ++k) {
      // Low experts far more often: a biased pick among the remaining ones.
      std::uniform_real_distribution<double> u(0, 1);
      size_t pick = static_cast<size_t>(u(rng) * u(rng) * static_cast<double>(E - k));
      choice[n * K + k] = experts[pick];
      experts.erase(experts.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }
  // One rank: kept[a] for each assignment in token order.
  std::vector<char> kept(tokens * K);
  std::vector<int64_t> seen(E, 0);
  for (int64_t a = 0; a < tokens * K; ++a) kept[a] = seen[choice[a]]++ < capacity;

  // Every rank's runs, and its rows' top-k choices in local row order.
  const int64_t local_seq = seq / cp;
  std::vector<std::vector<TokenRun>> runs;
  std::vector<std::vector<int32_t>> rows_idx;
  int64_t runs_max = 0;
  for (int c = 0; c < cp; ++c)
    for (int t = 0; t < tp; ++t) {
      trainer::parallel::CpLayout layout{cp, c, seq};
      runs.push_back(token_runs(layout, sequences, tp, t));
      runs_max = std::max<int64_t>(runs_max, runs.back().size());
      int64_t rows = 0;
      std::vector<int32_t> idx;
      for (const TokenRun& r : runs.back()) {
        REQUIRE(r.local_begin == rows);  // local rows are covered in order
        rows += r.length;
        idx.insert(idx.end(), choice.begin() + r.global_begin * K,
                   choice.begin() + (r.global_begin + r.length) * K);
      }
      REQUIRE(rows == sequences * local_seq / tp);
      rows_idx.push_back(std::move(idx));
    }
  // Each rank's run loads (moe_run_loads), gathered rank after rank.
  Context ctx;
  std::vector<int32_t> all_loads(runs.size() * runs_max * E, -1);
  for (size_t r = 0; r < runs.size(); ++r) {
    std::vector<int32_t> table = run_table(runs[r], runs_max);
    const int64_t rows = static_cast<int64_t>(rows_idx[r].size()) / K;
    trainer::moe_run_loads(ctx, Tensor(all_loads.data() + r * runs_max * E, {runs_max, E}, DType::i32),
                           Tensor(rows_idx[r].data(), {rows, K}, DType::i32),
                           Tensor(table.data(), {runs_max, 2}, DType::i32));
  }
  // The ranks' rows tile the micro-batch exactly once.
  std::vector<int> covered(tokens, 0);
  for (const auto& rs : runs)
    for (const TokenRun& r : rs)
      for (int64_t n = 0; n < r.length; ++n) ++covered[r.global_begin + n];
  for (int64_t n = 0; n < tokens; ++n) REQUIRE(covered[n] == 1);

  for (int self = 0; self < static_cast<int>(runs.size()); ++self) {
    std::vector<int32_t> order = capacity_order(runs, self, runs_max), taken(E, -1);
    const int64_t Q = static_cast<int64_t>(order.size()) / 2;
    trainer::moe_capacity_taken(ctx, Tensor(taken.data(), {E}, DType::i32),
                                Tensor(all_loads.data(), {static_cast<int64_t>(runs.size()) * runs_max, E},
                                       DType::i32),
                                Tensor(order.data(), {Q, 2}, DType::i32), capacity);
    // moe_plan's rule on this rank: expert e keeps its first capacity - taken[e]
    // assignments in local row order.
    std::vector<int64_t> local_seen(E, 0);
    for (const TokenRun& r : runs[self])
      for (int64_t n = r.global_begin; n < r.global_begin + r.length; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const int32_t e = choice[n * K + k];
          const bool plan_keeps = local_seen[e]++ < capacity - taken[e];
          INFO("rank " << self << " token " << n << " expert " << e);
          REQUIRE(plan_keeps == static_cast<bool>(kept[n * K + k]));
        }
  }
}

}  // namespace

TEST_CASE("shared MoE capacity keeps what one rank keeps", "[moe][capacity]") {
  uint32_t seed = 1;
  for (int cp : {1, 2, 4})
    for (int tp : {1, 2, 4})
      for (int64_t sequences : {1, 3})
        for (int64_t capacity : {1, 3, 8}) {
          const int64_t seq = 16;  // a multiple of 2 cp, and seq / cp of tp
          check_split(cp, tp, sequences, seq, 6, 2, capacity, seed++);
        }
}

TEST_CASE("token runs of a cp rank are its two chunks per sequence", "[moe][capacity]") {
  trainer::parallel::CpLayout layout{2, 1, 8};  // chunks of 2: rank 1 holds chunks 1 and 2
  std::vector<TokenRun> runs = token_runs(layout, 2, 1, 0);
  REQUIRE(runs.size() == 4);
  REQUIRE(runs[0].global_begin == 2);
  REQUIRE(runs[1].global_begin == 4);
  REQUIRE(runs[2].global_begin == 10);
  REQUIRE(runs[3].global_begin == 12);
  // SP over tp 2 on top: rank 1 of tp holds the second sequence's chunks.
  runs = token_runs(layout, 2, 2, 1);
  REQUIRE(runs.size() == 2);
  REQUIRE(runs[0].global_begin == 10);
  REQUIRE(runs[0].local_begin == 0);
  REQUIRE(runs[1].local_begin == 2);
}

TEST_CASE("moe_run_loads and moe_capacity_taken refuse bad tables", "[moe][capacity]") {
  Context ctx;
  // Two rows of top-2; expert 7 of 3 and -1 are not counted (moe_plan refuses them).
  std::vector<int32_t> idx = {0, 2, 7, -1}, loads(6, -5);
  std::vector<int32_t> runs = {0, 2, 0, 0};  // one run of both rows, one padding row
  const Tensor t_loads(loads.data(), {2, 3}, DType::i32), t_idx(idx.data(), {2, 2}, DType::i32);
  trainer::moe_run_loads(ctx, t_loads, t_idx, Tensor(runs.data(), {2, 2}, DType::i32));
  REQUIRE(loads == std::vector<int32_t>{1, 0, 1, 0, 0, 0});
  runs = {1, 2, 0, 0};
  REQUIRE_THROWS_WITH(trainer::moe_run_loads(ctx, t_loads, t_idx, Tensor(runs.data(), {2, 2}, DType::i32)),
                      Catch::Contains("run 0 (rows 1 + 2) is outside the 2 routed rows"));
  std::vector<int32_t> taken(3), order = {0, 1, 2, 0};
  const Tensor t_taken(taken.data(), {3}, DType::i32), t_order(order.data(), {2, 2}, DType::i32);
  REQUIRE_THROWS_WITH(trainer::moe_capacity_taken(ctx, t_taken, t_loads, t_order, 1),
                      Catch::Contains("order[1] = (2, 0) is not (a row of the 2 loads, 0 or 1)"));
  order = {0, 1, 1, 0};
  REQUIRE_THROWS_WITH(trainer::moe_capacity_taken(ctx, t_taken, t_loads, t_order, 0),
                      Catch::Contains("capacity 0 must be positive"));
  // Run 1 (not this rank's) comes after this rank's run 0 here: nothing taken
  // before it, so this rank keeps its one assignment of experts 0 and 2.
  trainer::moe_capacity_taken(ctx, t_taken, t_loads, t_order, 1);
  REQUIRE(taken == std::vector<int32_t>{0, 1, 0});
}
