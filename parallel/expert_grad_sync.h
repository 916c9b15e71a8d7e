// Gradient averaging for a flat arena that holds two kinds of parameters
// under expert parallelism: dense ones (replicated over dp, averaged over dp
// as GradReducer does) and routed experts (each ep rank holds other experts
// at the same arena offsets, so they are reduced over the edp group only).
#pragma once

#include <vector>

#include "kernels/context.h"
#include "parallel/grad_sync.h"

namespace trainer::parallel {

// One parameter's gradient in the arena and its kind.
struct KindedRange {
  GradRange range;
  bool expert = false;
};

// Expert gradient scaling. Each rank's backward is scaled for an average
// over dp (dloss = dp / tokens), and an expert's gradient on a rank already
// sums the contributions of the tokens all ep peers sent it; summing that
// over edp covers every token once, so the average is sum_edp / dp =
// avg_edp / ep. Dense gradients: avg over dp, unchanged.
class ExpertGradReducer {
 public:
  // `grads` in any order; maximal runs of one kind, adjacent in the arena
  // (alignment gaps between them included: keep them zero), are reduced as
  // one buffer each.
  ExpertGradReducer(Communicator& dp, Communicator& edp, int ep, Tensor arena,
                    std::vector<KindedRange> grads);
  void reduce_all(Context& ctx);

  struct Run {
    int64_t begin = 0, end = 0;
    bool expert = false;
  };
  const std::vector<Run>& runs() const { return runs_; }

 private:
  Communicator& dp_;
  Communicator& edp_;
  int ep_;
  Tensor arena_;
  std::vector<Run> runs_;
};

}  // namespace trainer::parallel
