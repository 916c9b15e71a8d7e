#include "model/moe_capacity.h"

#include <algorithm>

#include "kernels/error.h"

namespace trainer::model {

std::vector<TokenRun> token_runs(const parallel::CpLayout& cp, int64_t sequences, int64_t tp,
                                 int64_t tp_rank) {
  const int64_t rows = sequences * (cp.cp == 1 ? cp.seq : cp.local_tokens());
  TRAINER_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp && rows % tp == 0,
                "token_runs: {} rows do not split over tp {} (rank {})", rows, tp, tp_rank);
  const int64_t lo = tp_rank * (rows / tp), hi = lo + rows / tp;
  std::vector<TokenRun> runs;
  const int64_t seq = cp.seq;
  // A chunk of rows from local row `first`, at `position` of its sequence.
  auto add = [&](int64_t first, int64_t position, int64_t length) {
    const int64_t b = first / (rows / sequences);
    const int64_t begin = std::max(first, lo), end = std::min(first + length, hi);
    if (begin < end)
      runs.push_back({b * seq + position + (begin - first), begin - lo, end - begin});
  };
  if (cp.cp == 1) {  // whole sequences (CpLayout's chunks need an even length)
    for (int64_t b = 0; b < sequences; ++b) add(b * seq, 0, seq);
  } else {
    cp.for_each_chunk(sequences, [&](int64_t first, int64_t position) { add(first, position, cp.chunk()); });
  }
  return runs;
}

std::vector<int32_t> shared_capacity_taken(const std::vector<RankRuns>& ranks, int self,
                                           int64_t experts, int64_t capacity) {
  struct Ref {
    int64_t global_begin;
    int rank;
    size_t run;
  };
  std::vector<Ref> order;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r)
    for (size_t i = 0; i < ranks[r].runs.size(); ++i) order.push_back({ranks[r].runs[i].global_begin, r, i});
  std::sort(order.begin(), order.end(),
            [](const Ref& a, const Ref& b) { return a.global_begin < b.global_begin; });
  std::vector<int64_t> before(experts, 0), kept(experts, 0);
  for (const Ref& ref : order) {
    const int32_t* load = ranks[ref.rank].loads + ref.run * experts;
    for (int64_t e = 0; e < experts; ++e) {
      // The run's assignments to e hold places before[e] .. before[e] + load - 1.
      if (ref.rank == self) kept[e] += std::clamp<int64_t>(capacity - before[e], 0, load[e]);
      before[e] += load[e];
    }
  }
  std::vector<int32_t> taken(experts);
  for (int64_t e = 0; e < experts; ++e) taken[e] = static_cast<int32_t>(capacity - kept[e]);
  return taken;
}

}  // namespace trainer::model
