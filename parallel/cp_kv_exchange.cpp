// The cp K/V exchange over the Communicator interface (see cp_kv_exchange.h).
#include "parallel/cp_kv_exchange.h"

#include "kernels/elementwise.h"

namespace trainer::parallel {

namespace {

Tensor flat(Tensor t) { return t.view({t.numel()}); }

// Copies between the rank-blocked order the collectives use, (cp, B, 2c, row),
// and sequence order, (B, T, row), one contiguous chunk of c rows at a time:
// to_global = true moves blocked -> global, false global -> blocked.
void reorder(Context& ctx, const CpLayout& l, Tensor blocked, Tensor global, bool to_global) {
  TRAINER_CHECK(global.ndim == 4 && global.size(1) == l.seq && blocked.numel() == global.numel() &&
                    blocked.contiguous() && global.contiguous(),
                "cp K/V reorder: blocked {} and global {} for sequences of {} tokens", blocked.str(),
                global.str(), l.seq);
  const int64_t B = global.size(0), row = global.size(2) * global.size(3), c = l.chunk();
  const Tensor b = flat(blocked), g = flat(global);
  for (int r = 0; r < l.cp; ++r)
    for (int j = 0; j < CpLayout::kLocalChunks; ++j)
      for (int64_t s = 0; s < B; ++s) {
        const int64_t from = ((int64_t(r) * B + s) * l.local_tokens() + j * c) * row;
        const int64_t to = (s * l.seq + l.global_chunk(j, r) * c) * row;
        const Tensor bs = b.slice(from, from + c * row), gs = g.slice(to, to + c * row);
        if (to_global)
          copy(ctx, gs, bs);
        else
          copy(ctx, bs, gs);
      }
}

}  // namespace

void cp_gather_kv(Context& ctx, Communicator& cp, const CpLayout& layout, Tensor local,
                  Tensor blocked, Tensor global) {
  TRAINER_CHECK(cp.size() == layout.cp && local.numel() * layout.cp == global.numel(),
                "cp_gather_kv: {} x {} ranks != {}", local.str(), cp.size(), global.str());
  cp.all_gather(flat(local), flat(blocked));
  reorder(ctx, layout, blocked, global, true);
}

void cp_reduce_scatter_kv(Context& ctx, Communicator& cp, const CpLayout& layout, Tensor dglobal,
                          Tensor blocked, Tensor dlocal) {
  TRAINER_CHECK(cp.size() == layout.cp && dlocal.numel() * layout.cp == dglobal.numel(),
                "cp_reduce_scatter_kv: {} x {} ranks != {}", dlocal.str(), cp.size(),
                dglobal.str());
  reorder(ctx, layout, blocked, dglobal, false);
  cp.reduce_scatter(flat(blocked), flat(dlocal), ReduceOp::sum);
}

}  // namespace trainer::parallel
