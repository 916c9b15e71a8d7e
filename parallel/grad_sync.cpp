// Bucketed DP gradient averaging and ZeRO shard helpers (see grad_sync.h).
#include "parallel/grad_sync.h"

#include <algorithm>

#include "kernels/error.h"

namespace trainer::parallel {

std::vector<GradBucket> plan_buckets(std::span<const GradRange> grads, int64_t bucket_bytes,
                                     DType dtype) {
  TRAINER_CHECK(bucket_bytes > 0, "bucket size {} bytes must be positive", bucket_bytes);
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  std::vector<GradBucket> buckets;
  GradBucket current;
  int64_t current_bytes = 0;
  for (int i = 0; i < static_cast<int>(grads.size()); ++i) {
    const GradRange& g = grads[i];
    TRAINER_CHECK(g.offset >= 0 && g.numel >= 0, "gradient {}: bad range", i);
    if (current.tensors.empty()) {
      current.begin = g.offset;
      current.end = g.offset + g.numel;
    } else {
      current.begin = std::min(current.begin, g.offset);
      current.end = std::max(current.end, g.offset + g.numel);
    }
    current.tensors.push_back(i);
    current_bytes += g.numel * elem;
    if (current_bytes >= bucket_bytes) {
      buckets.push_back(std::move(current));
      current = GradBucket();
      current_bytes = 0;
    }
  }
  if (!current.tensors.empty()) buckets.push_back(std::move(current));

  // A range covered twice would be averaged twice: refuse.
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const GradBucket& b : buckets) spans.emplace_back(b.begin, b.end);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    TRAINER_CHECK(spans[i].first >= spans[i - 1].second,
                  "gradient buckets [{}, {}) and [{}, {}) overlap: tensors of a bucket must be "
                  "adjacent in the arena",
                  spans[i - 1].first, spans[i - 1].second, spans[i].first, spans[i].second);
  }
  return buckets;
}

GradReducer::GradReducer(Communicator& dp, Tensor arena, std::vector<GradRange> grads,
                         int64_t bucket_bytes)
    : dp_(dp), arena_(arena), grads_(std::move(grads)) {
  TRAINER_CHECK(arena.contiguous() && (arena.dtype == DType::f32 || arena.dtype == DType::f64),
                "gradient arena {} must be a contiguous float buffer", arena.str());
  buckets_ = plan_buckets(grads_, bucket_bytes, arena.dtype);
  for (const GradBucket& b : buckets_) {
    TRAINER_CHECK(b.end <= arena.numel(), "gradient bucket [{}, {}) beyond arena {}", b.begin,
                  b.end, arena.str());
  }
  bucket_of_.assign(grads_.size(), -1);
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    for (int t : buckets_[b].tensors) bucket_of_[t] = b;
  }
  missing_.resize(buckets_.size());
  reduced_.resize(buckets_.size());
  ready_.resize(grads_.size());
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    missing_[b] = static_cast<int>(buckets_[b].tensors.size());
  }
}

void GradReducer::reduce_bucket(int b) {
  const GradBucket& bucket = buckets_[b];
  Tensor flat = arena_.view({arena_.numel()}).slice(bucket.begin, bucket.end);
  if (before_reduce_) before_reduce_();
  dp_.all_reduce(flat, ReduceOp::avg);
  reduced_[b] = true;
}

void GradReducer::mark_ready(int tensor) {
  TRAINER_CHECK(tensor >= 0 && tensor < static_cast<int>(grads_.size()) && !ready_[tensor],
                "gradient {} marked ready twice or out of range", tensor);
  ready_[tensor] = true;
  const int b = bucket_of_[tensor];
  if (--missing_[b] == 0) {
    reduce_bucket(b);
    ++reduced_early_;
  }
}

void GradReducer::finish() {
  // Every rank reduces the leftover buckets in the same (bucket) order.
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    if (!reduced_[b]) reduce_bucket(b);
  }
  if (after_reduce_)
    after_reduce_();
  else
    dp_.synchronize();
  reduced_early_last_ = reduced_early_;
  reduced_early_ = 0;
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    missing_[b] = static_cast<int>(buckets_[b].tensors.size());
    reduced_[b] = false;
  }
  std::fill(ready_.begin(), ready_.end(), false);
}

ZeroShard zero_shard(int64_t numel, int dp_size, int dp_rank, int64_t align_elems) {
  TRAINER_CHECK(numel >= 0 && dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size &&
                    align_elems >= 1,
                "zero_shard({}, {}, {}, {})", numel, dp_size, dp_rank, align_elems);
  ZeroShard s;
  s.numel = numel;
  const int64_t unit = static_cast<int64_t>(dp_size) * align_elems;
  s.padded = (numel + unit - 1) / unit * unit;
  s.shard = s.padded / dp_size;
  s.begin = static_cast<int64_t>(dp_rank) * s.shard;
  return s;
}

void zero_reduce_scatter(Communicator& dp, Tensor arena, const ZeroShard& shard) {
  check_count(dp, "zero_reduce_scatter", arena, shard.padded, "arena (padded)");
  Tensor flat = arena.view({arena.numel()});
  dp.reduce_scatter(flat, flat.slice(shard.begin, shard.end()), ReduceOp::avg);
}

void zero_all_gather(Communicator& dp, Tensor arena, const ZeroShard& shard) {
  check_count(dp, "zero_all_gather", arena, shard.padded, "arena (padded)");
  Tensor flat = arena.view({arena.numel()});
  dp.all_gather(flat.slice(shard.begin, shard.end()), flat);
}

double group_sum(Communicator& comm, double local) {
  double value = local;
  comm.all_reduce(Tensor(&value, {1}, DType::f64), ReduceOp::sum);
  return value;
}

}  // namespace trainer::parallel
