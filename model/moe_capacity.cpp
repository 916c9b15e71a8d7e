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

std::vector<int32_t> seq_row_table(const std::vector<TokenRun>& runs, int64_t sequences,
                                   int64_t seq_len) {
  std::vector<int32_t> table(2 * sequences, 0);
  for (const TokenRun& r : runs) {
    const int64_t b = r.global_begin / seq_len;
    TRAINER_CHECK(b >= 0 && b < sequences && (r.global_begin + r.length - 1) / seq_len == b,
                  "seq_row_table: a run of {} tokens from {} is not inside one of {} sequences of {}",
                  r.length, r.global_begin, sequences, seq_len);
    int32_t& first = table[2 * b];
    int32_t& rows = table[2 * b + 1];
    if (rows == 0) first = static_cast<int32_t>(r.local_begin);
    TRAINER_CHECK(first + rows == r.local_begin,
                  "seq_row_table: sequence {}'s rows are not contiguous (row {} after [{}, {}))", b,
                  r.local_begin, first, first + rows);
    rows += static_cast<int32_t>(r.length);
  }
  return table;
}

std::vector<int32_t> run_table(const std::vector<TokenRun>& runs, int64_t runs_max) {
  TRAINER_CHECK(static_cast<int64_t>(runs.size()) <= runs_max, "run_table: {} runs over room for {}",
                runs.size(), runs_max);
  std::vector<int32_t> table(2 * runs_max, 0);
  for (size_t r = 0; r < runs.size(); ++r) {
    table[2 * r] = static_cast<int32_t>(runs[r].local_begin);
    table[2 * r + 1] = static_cast<int32_t>(runs[r].length);
  }
  return table;
}

std::vector<int32_t> capacity_order(const std::vector<std::vector<TokenRun>>& ranks, int self,
                                    int64_t runs_max) {
  struct Ref {
    int64_t global_begin;
    int64_t row;
    int mine;
  };
  std::vector<Ref> order;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    TRAINER_CHECK(static_cast<int64_t>(ranks[r].size()) <= runs_max,
                  "capacity_order: rank {} has {} runs over room for {}", r, ranks[r].size(), runs_max);
    for (size_t i = 0; i < ranks[r].size(); ++i)
      order.push_back({ranks[r][i].global_begin, r * runs_max + static_cast<int64_t>(i), r == self});
  }
  std::sort(order.begin(), order.end(),
            [](const Ref& a, const Ref& b) { return a.global_begin < b.global_begin; });
  std::vector<int32_t> table;
  for (const Ref& ref : order) {
    table.push_back(static_cast<int32_t>(ref.row));
    table.push_back(ref.mine);
  }
  return table;
}

}  // namespace trainer::model
