// Shared capacity (model/moe_capacity.h) against one rank's rule: route a
// whole micro-batch, keep each expert's first `capacity` assignments in token
// order, split the tokens over cp chunks and SP blocks, and require that each
// rank's `taken` makes moe_plan's prefix rule keep exactly those.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "model/moe_capacity.h"

using trainer::model::RankRuns;
using trainer::model::shared_capacity_taken;
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

  // Every rank's runs and loads.
  const int64_t local_seq = seq / cp;
  std::vector<std::vector<TokenRun>> runs;
  std::vector<std::vector<int32_t>> loads;
  for (int c = 0; c < cp; ++c)
    for (int t = 0; t < tp; ++t) {
      trainer::parallel::CpLayout layout{cp, c, seq};
      runs.push_back(token_runs(layout, sequences, tp, t));
      int64_t rows = 0;
      for (const TokenRun& r : runs.back()) {
        REQUIRE(r.local_begin == rows);  // local rows are covered in order
        rows += r.length;
      }
      REQUIRE(rows == sequences * local_seq / tp);
      std::vector<int32_t> l(runs.back().size() * E, 0);
      for (size_t i = 0; i < runs.back().size(); ++i)
        for (int64_t n = 0; n < runs.back()[i].length; ++n)
          for (int64_t k = 0; k < K; ++k) ++l[i * E + choice[(runs.back()[i].global_begin + n) * K + k]];
      loads.push_back(std::move(l));
    }
  std::vector<RankRuns> ranks;
  for (size_t r = 0; r < runs.size(); ++r) ranks.push_back({runs[r], loads[r].data()});
  // The ranks' rows tile the micro-batch exactly once.
  std::vector<int> covered(tokens, 0);
  for (const auto& rs : runs)
    for (const TokenRun& r : rs)
      for (int64_t n = 0; n < r.length; ++n) ++covered[r.global_begin + n];
  for (int64_t n = 0; n < tokens; ++n) REQUIRE(covered[n] == 1);

  for (int self = 0; self < static_cast<int>(ranks.size()); ++self) {
    std::vector<int32_t> taken = shared_capacity_taken(ranks, self, E, capacity);
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
        for (int64_t capacity : {0, 1, 3, 8}) {
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
