// Tensor- and sequence-parallel region ops, in Megatron-Core's pairs. A layer
// marks where its tensor enters or leaves a TP region and calls the forward
// or backward half; it never talks to a communicator itself. With a group of
// one rank every op is the identity (or a copy).
//
//   copy_to_tp       forward: identity            backward: all-reduce (sum)
//   reduce_from_tp   forward: all-reduce (sum)    backward: identity
//   gather_from_sp   forward: all-gather tokens   backward: reduce-scatter (sum)
//   scatter_to_sp    forward: reduce-scatter      backward: all-gather tokens
//
// Tokens are split in contiguous blocks of N / tp rows of a (N, C) tensor.
#pragma once

#include "parallel/communicator.h"

namespace trainer::parallel {

// dx (N, C): in place, the sum over the group.
void copy_to_tp_backward(Communicator& tp, Tensor dx);
// y (N, C): in place, the sum over the group.
void reduce_from_tp_forward(Communicator& tp, Tensor y);
// shard (N/tp, C) -> full (N, C)
void gather_from_sp_forward(Communicator& tp, Tensor shard, Tensor full);
// dfull (N, C) -> dshard (N/tp, C): summed over the group
void gather_from_sp_backward(Communicator& tp, Tensor dfull, Tensor dshard);
// partial (N, C) -> shard (N/tp, C): summed over the group
void scatter_to_sp_forward(Communicator& tp, Tensor partial, Tensor shard);
// dshard (N/tp, C) -> dfull (N, C)
void scatter_to_sp_backward(Communicator& tp, Tensor dshard, Tensor dfull);

}  // namespace trainer::parallel
