// Region ops over the Communicator interface.
#include "parallel/tp_regions.h"

namespace trainer::parallel {

namespace {
Tensor flat(Tensor t) { return t.view({t.numel()}); }
}  // namespace

void copy_to_tp_backward(Communicator& tp, Tensor dx) {
  if (tp.size() > 1) tp.all_reduce(flat(dx), ReduceOp::sum);
}

void reduce_from_tp_forward(Communicator& tp, Tensor y) {
  if (tp.size() > 1) tp.all_reduce(flat(y), ReduceOp::sum);
}

void gather_from_sp_forward(Communicator& tp, Tensor shard, Tensor full) {
  TRAINER_CHECK(shard.numel() * tp.size() == full.numel(), "gather_from_sp: {} x {} != {}",
                shard.str(), tp.size(), full.str());
  tp.all_gather(flat(shard), flat(full));
}

void gather_from_sp_backward(Communicator& tp, Tensor dfull, Tensor dshard) {
  TRAINER_CHECK(dshard.numel() * tp.size() == dfull.numel(), "gather_from_sp backward: {} x {} != {}",
                dshard.str(), tp.size(), dfull.str());
  tp.reduce_scatter(flat(dfull), flat(dshard), ReduceOp::sum);
}

void scatter_to_sp_forward(Communicator& tp, Tensor partial, Tensor shard) {
  gather_from_sp_backward(tp, partial, shard);
}

void scatter_to_sp_backward(Communicator& tp, Tensor dshard, Tensor dfull) {
  gather_from_sp_forward(tp, dshard, dfull);
}

}  // namespace trainer::parallel
