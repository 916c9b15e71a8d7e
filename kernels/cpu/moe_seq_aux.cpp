// CPU sequence-wise balance loss (kernels/moe_seq_aux.h). A sequence's sums run
// over its rows ascending in double, and each row's gradient depends on that row
// alone, so nothing depends on the thread count.
#include "kernels/moe_seq_aux.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_common.h"

namespace trainer::cpu {

namespace {

// The (first row, rows) ranges, checked: inside the N rows and disjoint
// (sorted by first row, each non-empty one ends where or before the next begins).
std::vector<std::pair<int64_t, int64_t>> ranges(const Tensor& seq_rows, int64_t N, const char* op) {
  TRAINER_CHECK(seq_rows.device == Device::cpu, "{}: seq_rows {} must be on the CPU", op,
                seq_rows.str());
  const int32_t* r = i32(seq_rows, op, "seq_rows");
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t b = 0; b < seq_rows.size(0); ++b) {
    const int64_t first = r[2 * b], rows = r[2 * b + 1];
    TRAINER_CHECK(rows >= 0 && first >= 0 && first + rows <= N,
                  "{}: sequence {}'s rows [{}, {}) are outside the {} rows", op, b, first,
                  first + rows, N);
    out.emplace_back(first, rows);
  }
  std::vector<std::pair<int64_t, int64_t>> sorted;
  for (const auto& range : out)
    if (range.second > 0) sorted.push_back(range);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    TRAINER_CHECK(sorted[i - 1].first + sorted[i - 1].second <= sorted[i].first,
                  "{}: row {} is in two sequences' ranges", op, sorted[i].first);
  return out;
}

const float* logits_of(const Tensor& logits, const char* op) {
  TRAINER_CHECK(logits.device == Device::cpu, "{}: logits {} must be on the CPU", op, logits.str());
  return static_cast<const float*>(logits.data);
}

double* f64(const Tensor& t, const char* op, const char* name) {
  TRAINER_CHECK(t.device == Device::cpu && t.dtype == DType::f64 && t.contiguous(),
                "{}: {} {} must be contiguous fp64 on the CPU", op, name, t.str());
  return static_cast<double*>(t.data);
}

}  // namespace

// max_rows sizes only the device's grid: a sequence's sum here is one loop.
void moe_seq_aux_sums(Context&, Tensor sums, Tensor logits, Tensor seq_rows, int64_t max_rows,
                      int64_t top_k, bool sigmoid) {
  const char* op = "moe_seq_aux_sums";
  check_seq_aux_args(sums, logits, seq_rows, top_k, op);
  TRAINER_CHECK(max_rows >= 0, "{}: max_rows {} must not be negative", op, max_rows);
  const int64_t N = logits.size(0), E = logits.size(1);
  const auto rng = ranges(seq_rows, N, op);
  const float* l = logits_of(logits, op);
  double* s = f64(sums, op, "sums");
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < static_cast<int64_t>(rng.size()); ++b) {
    double* count = s + b * 2 * E;
    double* score = count + E;
    for (int64_t e = 0; e < 2 * E; ++e) count[e] = 0.0;
    for (int64_t n = rng[b].first; n < rng[b].first + rng[b].second; ++n) {
      const float* row = l + n * E;
      const SeqAuxRow r = seq_aux_row(row, E, top_k, sigmoid);
      for (int64_t e = 0; e < E; ++e) {
        count[e] += seq_aux_chosen(row[e], e, r) ? 1.0 : 0.0;
        score[e] += seq_aux_score(row[e], r, sigmoid);
      }
    }
  }
}

void moe_seq_aux_loss(Context&, Tensor loss, Tensor step_aux, Tensor sums, int64_t seq_len,
                      int64_t top_k, float coeff) {
  const char* op = "moe_seq_aux_loss";
  const int64_t E = check_seq_aux_sums(sums, seq_len, top_k, op), B = sums.size(0);
  const double* s = f64(sums, op, "sums");
  check_shape(loss, {1}, "moe_seq_aux_loss loss");
  float* out = f32(loss, op, "loss");
  double total = 0;
  for (int64_t b = 0; b < B; ++b) {
    double seq = 0;
    for (int64_t e = 0; e < E; ++e) seq += s[b * 2 * E + e] * s[b * 2 * E + E + e];
    total += seq;
  }
  out[0] = static_cast<float>(total * seq_aux_factor(B, E, top_k, seq_len));
  if (!step_aux.empty()) {
    check_shape(step_aux, {1}, "moe_seq_aux_loss step_aux");
    f32(step_aux, op, "step_aux")[0] += coeff * out[0];
  }
}

void moe_seq_aux_backward(Context&, Tensor dlogits, Tensor logits, Tensor seq_rows, Tensor sums,
                          int64_t seq_len, int64_t top_k, float scale, bool sigmoid) {
  const char* op = "moe_seq_aux_backward";
  check_seq_aux_args(sums, logits, seq_rows, top_k, op);
  const int64_t N = logits.size(0), E = logits.size(1), B = seq_rows.size(0);
  check_shape(dlogits, {N, E}, "moe_seq_aux_backward dlogits");
  TRAINER_CHECK(seq_len > 0, "{}: seq_len {} must be positive", op, seq_len);
  const auto rng = ranges(seq_rows, N, op);
  const float* l = logits_of(logits, op);
  float* dl = f32(dlogits, op, "dlogits");
  const double* s = f64(sums, op, "sums");
  const double factor = double(scale) * seq_aux_factor(B, E, top_k, seq_len);
  for (int64_t b = 0; b < B; ++b) {
    const double* count = s + b * 2 * E;
#pragma omp parallel for schedule(static)
    for (int64_t n = rng[b].first; n < rng[b].first + rng[b].second; ++n)
      seq_aux_row_backward(dl + n * E, l + n * E, count, E, top_k, factor, sigmoid);
  }
}

}  // namespace trainer::cpu
