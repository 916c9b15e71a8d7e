// See rope_positions.h.
#include "model/rope_positions.h"

#include "kernels/rope.h"

namespace trainer::model {

void rope_at_positions(const LayerEnv& env, const parallel::CpLayout& cp, const Rope& rotary,
                       Tensor x, bool forward) {
  auto apply = [&](Tensor t, int64_t pos, Tensor positions) {
    if (forward)
      rope_forward(env.ctx, t, t, rotary, pos, positions);
    else
      rope_backward(env.ctx, t, t, rotary, pos, positions);
  };
  // Positions restarting with each document: one call at the tokens' own.
  if (!env.positions.empty()) return apply(x, 0, env.positions.view({x.size(0), x.size(1)}));
  if (cp.cp == 1) return apply(x, 0, Tensor{});
  // One contiguous (1, c, h, D) block per sequence and chunk, at its global offset.
  const int64_t c = cp.chunk(), row = x.size(2) * x.size(3);
  Tensor flat = x.view({x.numel()});
  cp.for_each_chunk(x.size(0), [&](int64_t first, int64_t pos) {
    apply(flat.slice(first * row, (first + c) * row).view({1, c, x.size(2), x.size(3)}), pos,
          Tensor{});
  });
}

}  // namespace trainer::model
