// Data-parallel gradient synchronisation: bucketed all-reduce (average) of a
// flat fp32 gradient arena, and the ZeRO-1/2 helpers (shard layout,
// reduce-scatter of gradients, all-gather of updated parameters).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "parallel/communicator.h"

namespace trainer::parallel {

// One gradient tensor's place in the flat arena, in elements.
struct GradRange {
  int64_t offset = 0;
  int64_t numel = 0;
};

// A bucket: whole tensors, reduced as the one arena range [begin, end).
struct GradBucket {
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<int> tensors;  // indices into the GradRange list
};

// Groups the tensors, in the order given (pass them in the order backward
// finishes them: last layer first), into buckets of at least bucket_bytes
// (the last may be smaller; a bigger tensor is a bucket of its own). Tensors
// of one bucket must be adjacent in the arena (gaps between them, e.g.
// alignment padding, are reduced too, so keep padding zero); overlapping
// buckets are refused.
std::vector<GradBucket> plan_buckets(std::span<const GradRange> grads, int64_t bucket_bytes,
                                     DType dtype = DType::f32);

// Averages a gradient arena over a dp group bucket by bucket. Use either
// reduce_all() after backward, or mark_ready(i) as backward finishes tensor i
// (a full bucket is then reduced at once; on the GPU that is asynchronous on
// the communication stream and overlaps the rest of backward) and finish()
// before the optimizer reads the gradients. With gradient accumulation call
// mark_ready only in the last micro-batch. Buckets go out in the order they
// fill, the rest in bucket order at finish(): the same on every rank as long
// as every rank marks the same tensors in the same order.
class GradReducer {
 public:
  GradReducer(Communicator& dp, Tensor arena, std::vector<GradRange> grads, int64_t bucket_bytes);

  // Runs before each bucket's reduction is issued. On the GPU: make the
  // communicator's stream wait for the compute stream (cudaEventRecord +
  // cudaStreamWaitEvent) so the bucket's gradients are complete.
  void set_before_reduce(std::function<void()> hook) { before_reduce_ = std::move(hook); }
  // Replaces finish()'s wait for the communicator (synchronize()). On the
  // GPU: make the compute stream wait for the communication stream, so the
  // optimizer reads reduced gradients without the host waiting.
  void set_after_reduce(std::function<void()> hook) { after_reduce_ = std::move(hook); }
  void mark_ready(int tensor);
  // Reduces every bucket not yet reduced, waits, and re-arms for the next step.
  void finish();
  void reduce_all() { finish(); }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // Buckets the last finished step reduced from mark_ready (during backward)
  // rather than at finish().
  int buckets_reduced_early() const { return reduced_early_last_; }

 private:
  void reduce_bucket(int bucket);

  Communicator& dp_;
  Tensor arena_;
  std::vector<GradRange> grads_;
  std::vector<GradBucket> buckets_;
  std::vector<int> bucket_of_;    // tensor -> bucket
  std::vector<int> missing_;      // bucket -> tensors not yet ready
  std::vector<bool> reduced_;     // bucket -> reduced this step
  std::vector<bool> ready_;       // tensor -> marked this step
  int reduced_early_ = 0, reduced_early_last_ = 0;
  std::function<void()> before_reduce_, after_reduce_;
};

// ZeRO layout of a flat arena of `numel` elements over `dp_size` ranks: the
// arena is padded to a multiple of dp_size * align_elems so every shard starts
// aligned (64 fp32 = 256 B), and rank r owns [r*shard, (r+1)*shard).
struct ZeroShard {
  int64_t numel = 0;   // real elements
  int64_t padded = 0;  // arena size to allocate (padding kept zero)
  int64_t shard = 0;   // elements per rank
  int64_t begin = 0;   // this rank's first element
  int64_t end() const { return begin + shard; }
};
ZeroShard zero_shard(int64_t numel, int dp_size, int dp_rank, int64_t align_elems = 64);

// In place, arena[begin, end) becomes the dp average of that shard (the rest
// of the arena is left undefined). arena: (padded). The engine's ZeRO-2
// reduce-scatters block by block instead (engine/sharded_params.h); this flat
// form is what bench_collectives weighs against the all-reduce.
void zero_reduce_scatter(Communicator& dp, Tensor arena, const ZeroShard& shard);
// ZeRO-1: in place, every rank's updated shard [begin, end) lands in all
// ranks' arenas. arena: (padded)
void zero_all_gather(Communicator& dp, Tensor arena, const ZeroShard& shard);
// Sum of a per-rank double over a group (global gradient norm from shards:
// sqrt(group_sum(local sum of squares))).
double group_sum(Communicator& comm, double local);

}  // namespace trainer::parallel
