// CPU shared expert capacity (kernels/moe_capacity.h): integer counts, so any
// order gives the same numbers; the tables are checked here, where the host
// can read them (the CUDA kernels only stay in bounds).
#include "kernels/moe_capacity.h"

#include <algorithm>

#include "kernels/cpu/cpu_common.h"

namespace trainer::cpu {

void moe_run_loads(Context&, Tensor loads, Tensor topk_idx, Tensor runs) {
  const char* op = "moe_run_loads";
  const auto [N, K, R, E] = check_run_loads_shapes(loads, topk_idx, runs);
  const int32_t* idx = i32(topk_idx, op, "topk_idx");
  const int32_t* run = i32(runs, op, "runs");
  int32_t* out = i32w(loads, op, "loads");
  for (int64_t r = 0; r < R; ++r) {
    const int64_t first = run[2 * r], length = run[2 * r + 1];
    TRAINER_CHECK(first >= 0 && length >= 0 && first + length <= N,
                  "{}: run {} (rows {} + {}) is outside the {} routed rows", op, r, first, length, N);
    int32_t* row = out + r * E;
    std::fill(row, row + E, 0);
    for (int64_t a = first * K; a < (first + length) * K; ++a)
      if (idx[a] >= 0 && idx[a] < E) ++row[idx[a]];
  }
}

void moe_capacity_taken(Context&, Tensor taken, Tensor all_loads, Tensor order, int64_t capacity) {
  const char* op = "moe_capacity_taken";
  const auto [P, E, Q] = check_capacity_taken_shapes(taken, all_loads, order, capacity);
  const int32_t* loads = i32(all_loads, op, "all_loads");
  const int32_t* ord = i32(order, op, "order");
  int32_t* out = i32w(taken, op, "taken");
  for (int64_t q = 0; q < Q; ++q)
    TRAINER_CHECK(ord[2 * q] >= 0 && ord[2 * q] < P && (ord[2 * q + 1] == 0 || ord[2 * q + 1] == 1),
                  "{}: order[{}] = ({}, {}) is not (a row of the {} loads, 0 or 1)", op, q,
                  ord[2 * q], ord[2 * q + 1], P);
  for (int64_t e = 0; e < E; ++e) {
    int64_t before = 0, kept = 0;
    for (int64_t q = 0; q < Q; ++q) {
      const int64_t load = loads[ord[2 * q] * E + e];
      // The run's assignments to e hold places before .. before + load - 1.
      if (ord[2 * q + 1]) kept += std::clamp<int64_t>(capacity - before, 0, load);
      before += load;
    }
    out[e] = static_cast<int32_t>(capacity - kept);
  }
}

}  // namespace trainer::cpu
