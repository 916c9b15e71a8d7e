// Expert capacity shared by the ranks that split one micro-batch's tokens
// (sequence parallelism's tp blocks, context parallelism's chunks), so each
// expert keeps exactly the assignments one rank would: its first `capacity`
// in the micro-batch's token order (sequence b, position t).
//
// Every rank's rows are a few runs of consecutive tokens in that order (a cp
// rank holds chunks r and 2cp-1-r of each sequence; SP cuts the cp rank's rows
// into tp blocks), and its own rows are in token order among themselves. So
// the assignments an expert keeps on a rank are a prefix of the rank's, and
// moe_plan's single `taken` vector expresses them: the ranks exchange only
// per-run loads (runs x E counts), never tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/cp_layout.h"

namespace trainer::model {

struct TokenRun {
  int64_t global_begin = 0;  // first token's index in the micro-batch's order
  int64_t local_begin = 0;   // its row among the rank's routed rows
  int64_t length = 0;
};

// The runs of the rows routed by cp rank `cp.rank`, tp rank `tp_rank` (SP
// blocks of `rows_per_tp` rows; pass tp = 1 without SP) for `sequences`
// sequences, in local row order.
std::vector<TokenRun> token_runs(const parallel::CpLayout& cp, int64_t sequences, int64_t tp,
                                 int64_t tp_rank);

// One rank's runs with their loads (E assignments per run, before dropping).
struct RankRuns {
  std::vector<TokenRun> runs;
  const int32_t* loads = nullptr;  // runs.size() x E
};

// moe_plan's `taken` (E) for rank `self` of `ranks`: capacity minus what the
// rank keeps per expert, the assignments whose place among the expert's in
// token order (every rank's runs merged) is below `capacity`.
std::vector<int32_t> shared_capacity_taken(const std::vector<RankRuns>& ranks, int self,
                                           int64_t experts, int64_t capacity);

}  // namespace trainer::model
