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
// per-run loads (runs x E counts), never tokens. The counting and the walk in
// token order are device ops (kernels/moe_capacity.h); this file builds their
// tables, which the layout fixes.
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

// kernels/moe_seq_aux.h's seq_rows table, (sequences, 2) row-major: each
// sequence's (first local row, rows) among the rank's runs (a sequence's rows
// are one contiguous range: the local rows are in sequence order), 0 rows for
// a sequence the rank holds none of. seq_len: tokens per whole sequence.
std::vector<int32_t> seq_row_table(const std::vector<TokenRun>& runs, int64_t sequences,
                                   int64_t seq_len);

// moe_run_loads' runs table (kernels/moe_capacity.h), (runs_max, 2) row-major:
// (first local row, length) per run, zero-length rows after the rank's runs.
std::vector<int32_t> run_table(const std::vector<TokenRun>& runs, int64_t runs_max);

// moe_capacity_taken's order table for rank `self` of `ranks` (each padded to
// runs_max rows of gathered loads): every run in token order (global_begin),
// (rank * runs_max + run, 1 if rank == self else 0).
std::vector<int32_t> capacity_order(const std::vector<std::vector<TokenRun>>& ranks, int self,
                                    int64_t runs_max);

}  // namespace trainer::model
