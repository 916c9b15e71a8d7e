// Dense-over-dp, experts-over-edp gradient averaging (see expert_grad_sync.h).
#include "parallel/expert_grad_sync.h"

#include <algorithm>

#include "kernels/elementwise.h"
#include "kernels/error.h"

namespace trainer::parallel {

ExpertGradReducer::ExpertGradReducer(Communicator& dp, Communicator& edp, int ep, Tensor arena,
                                     std::vector<KindedRange> grads)
    : dp_(dp), edp_(edp), ep_(ep), arena_(arena) {
  TRAINER_CHECK(arena.contiguous() && arena.dtype == DType::f32 && ep >= 1 &&
                    dp.size() == edp.size() * ep,
                "expert gradient reducer: arena {}, dp {} != edp {} * ep {}", arena.str(),
                dp.size(), edp.size(), ep);
  std::sort(grads.begin(), grads.end(),
            [](const KindedRange& a, const KindedRange& b) { return a.range.offset < b.range.offset; });
  for (size_t i = 0; i < grads.size(); ++i) {
    const GradRange& g = grads[i].range;
    TRAINER_CHECK(g.offset >= 0 && g.numel >= 0 && g.offset + g.numel <= arena.numel() &&
                      (i == 0 || g.offset >= grads[i - 1].range.offset + grads[i - 1].range.numel),
                  "expert gradient reducer: range [{}, {}) overlaps or leaves the arena", g.offset,
                  g.offset + g.numel);
    if (g.numel == 0) continue;
    if (!runs_.empty() && runs_.back().expert == grads[i].expert)
      runs_.back().end = g.offset + g.numel;  // the alignment gap before it goes along
    else
      runs_.push_back({g.offset, g.offset + g.numel, grads[i].expert});
  }
}

void ExpertGradReducer::reduce_all(Context& ctx) {
  Tensor flat = arena_.view({arena_.numel()});
  // Every rank walks the same runs in the same order (same arena layout).
  for (const Run& r : runs_) {
    Tensor t = flat.slice(r.begin, r.end);
    if (!r.expert) {
      dp_.all_reduce(t, ReduceOp::avg);
      continue;
    }
    if (edp_.size() > 1) edp_.all_reduce(t, ReduceOp::avg);
    if (ep_ > 1) {
      // The scale runs on the compute stream: the reduction must be done.
      edp_.synchronize();
      scale(ctx, t, 1.0f / static_cast<float>(ep_));
    }
  }
  dp_.synchronize();
  edp_.synchronize();
}

}  // namespace trainer::parallel
